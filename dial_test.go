package ringlimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/limiter"
)

// dialCluster returns a client of every node of tc, closed at the end of
// the test.
func dialCluster(t *testing.T, tc *testCluster, mod func(*ringlimit.ClientConfig)) *ringlimit.Client {
	t.Helper()
	cfg := ringlimit.ClientConfig{Timeout: 2 * time.Second, Logger: quietLogger()}
	for _, n := range tc.live() {
		cfg.Addrs = append(cfg.Addrs, n.GRPCAddr())
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := ringlimit.DialConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The fleet client is package client's (tested there); the root's names
// for it are shorthands that still work: the types are the same, and
// Dial and DialConfig return a working client.
func TestDialShorthand(t *testing.T) {
	tc := startCluster(t, 1, nil)
	ctx := context.Background()
	var cfg client.Config = ringlimit.ClientConfig{
		Addrs: []string{tc.nodes[0].GRPCAddr()}, Timeout: 2 * time.Second, Logger: quietLogger(),
	}
	var c *client.Client
	c, err := ringlimit.DialConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lim := limiter.Limit{Uses: 1, Window: time.Minute}
	for i, want := range []bool{true, false} {
		if v, err := limiter.Consume(ctx, c, "k", lim); err != nil || v.Allowed != want {
			t.Fatalf("use %d: %+v %v; want allowed %v", i+1, v, err, want)
		}
	}
	var st ringlimit.ClientStats = c.Stats()
	if st.Calls != 2 {
		t.Errorf("stats %+v; want 2 calls", st)
	}
	var ms []cluster.Member
	if ms, err = c.Members(ctx); err != nil || len(ms) != 1 || ms[0].State != cluster.StateAlive {
		t.Errorf("Members: %+v %v; want one alive member", ms, err)
	}

	d, err := ringlimit.Dial(ctx, tc.nodes[0].GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if v, err := limiter.Consume(ctx, d, "k", lim); err != nil || v.Allowed {
		t.Fatalf("through Dial: %+v %v; want the key's use already taken", v, err)
	}

	var ie *limiter.InputError
	bad := ringlimit.ClientConfig{Addrs: cfg.Addrs, Security: ringlimit.Security{CertFile: "x"}}
	if _, err := ringlimit.DialConfig(ctx, bad); !errors.As(err, &ie) || ie.Field != "Security" {
		t.Errorf("DialConfig with a lone certificate file: %v; want an InputError on Security", err)
	}
	if _, err := ringlimit.ClientCredentials(ringlimit.Security{CAFile: "x"}); !errors.As(err, &ie) || ie.Field != "Security" {
		t.Errorf("ClientCredentials with a lone CA file: %v; want an InputError on Security", err)
	}
	if cfg, err := ringlimit.ClientTLS(ringlimit.Security{AuthToken: "t"}); cfg != nil || err != nil {
		t.Errorf("ClientTLS without certificate files: %v %v; want nil, nil", cfg, err)
	}
}

func ExampleDial() {
	ctx := context.Background()
	node, err := ringlimit.Start(ctx, ringlimit.Config{
		GossipAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", HTTPAddr: "-", Logger: quietLogger(),
	})
	if err != nil {
		panic(err)
	}
	defer node.Close(ctx)
	if err := node.WaitReady(ctx); err != nil {
		panic(err)
	}

	c, err := ringlimit.Dial(ctx, node.GRPCAddr()) // list every node of the fleet
	if err != nil {
		panic(err)
	}
	defer c.Close()
	login := limiter.Limit{Uses: 2, Window: time.Minute}
	for range 3 {
		v, err := limiter.Consume(ctx, c, "login:alice", login)
		if err != nil {
			panic(err)
		}
		fmt.Println(v.Allowed, v.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}
