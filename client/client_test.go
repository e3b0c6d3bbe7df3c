package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
	"github.com/ringlimit/ringlimit/rpc"
)

func TestClientConformance(t *testing.T) {
	// A node timeout well above the loaded machine's forward latency: a
	// forward that waits past it is decided by the local fallback (a share
	// of the limit per node), which the exactness cases would read as
	// over-admission.
	tc := startCluster(t, 3, func(cfg *ringlimit.Config) { cfg.Timeout = 2 * time.Second })
	c := dialCluster(t, tc, nil)
	storetest.RunWith(t, func(t *testing.T) limiter.Store { return c }, storetest.Options{Slack: 50 * time.Millisecond})
}

// A closed node's calls go to the others: no call fails.
func TestClientFailover(t *testing.T) {
	tc := startCluster(t, 3, nil)
	c := dialCluster(t, tc, nil)
	ctx := context.Background()
	lim := limiter.Limit{Uses: 1000, Window: time.Minute}
	for i := range 6 {
		if _, err := c.ConsumeMany(ctx, []limiter.Entry{{Key: fmt.Sprint("before-", i), Limit: lim}}); err != nil {
			t.Fatalf("call %d before the close: %v", i, err)
		}
	}
	tc.remove(tc.nodes[1])
	tc.waitMembers(2)
	// Every call in turn starts at another node, so the closed one is met
	// by a third of them (more often while its batcher backs off).
	for i := range 60 {
		v, err := c.ConsumeMany(ctx, []limiter.Entry{{Key: fmt.Sprint("after-", i), Limit: lim}})
		if err != nil {
			t.Fatalf("call %d after one node closed: %v (want a retry on another node)", i, err)
		}
		if !v.Allowed {
			t.Fatalf("call %d after one node closed: refused %+v", i, v)
		}
	}
	// The closed node was met: its first RPC failed (later ones fail fast
	// in the batcher's backoff, without an RPC).
	if st := c.Stats(); st.Errors == 0 {
		t.Fatalf("stats %+v: no RPC failed, so no call met the closed node", st)
	}
}

// When every node is down the call fails with ErrUnavailable, in time.
func TestClientAllDown(t *testing.T) {
	tc := startCluster(t, 1, nil)
	c := dialCluster(t, tc, func(cfg *client.Config) { cfg.Timeout = 300 * time.Millisecond })
	tc.remove(tc.nodes[0])
	_, err := c.ConsumeMany(context.Background(), []limiter.Entry{{Key: "k", Limit: limiter.Limit{Uses: 1, Window: time.Second}}})
	if !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("call with every node down: %v; want ErrUnavailable", err)
	}
}

// Bad input comes back as an *limiter.InputError naming the field.
func TestClientTypedErrors(t *testing.T) {
	tc := startCluster(t, 1, nil)
	c := dialCluster(t, tc, nil)
	ctx := context.Background()
	lim := limiter.Limit{Uses: 5, Window: time.Minute}
	cases := []struct {
		name    string
		entries []limiter.Entry
		field   string
		bound   bool
	}{
		{"empty key", []limiter.Entry{{Key: "ok", Limit: lim}, {Key: "", Limit: lim}}, "entries[1].key", false},
		{"zero uses", []limiter.Entry{{Key: "k", Limit: limiter.Limit{Window: time.Second}}}, "entries[0].limit.uses", false},
		{"sub-ms window", []limiter.Entry{{Key: "k", Limit: limiter.Limit{Uses: 1, Window: time.Microsecond}}}, "entries[0].limit.window", false},
		{"cost above uses", []limiter.Entry{{Key: "k", Limit: lim, Cost: 6}}, "entries[0].cost", false},
		{"long key", []limiter.Entry{{Key: string(make([]byte, 2000)), Limit: lim}}, "entries[0].key", true},
		{"no entries", nil, "entries", false},
	}
	for _, tt := range cases {
		for _, peek := range []bool{false, true} {
			var err error
			if peek {
				_, err = c.PeekMany(ctx, tt.entries)
			} else {
				_, err = c.ConsumeMany(ctx, tt.entries)
			}
			var ie *limiter.InputError
			if !errors.As(err, &ie) || ie.Field != tt.field || ie.Bound != tt.bound {
				t.Errorf("%s (peek %v): %v (%T); want an InputError on %q, bound %v", tt.name, peek, err, err, tt.field, tt.bound)
				continue
			}
			if !errors.Is(err, limiter.ErrInvalid) || errors.Is(err, limiter.ErrBound) != tt.bound {
				t.Errorf("%s: %v does not match ErrInvalid / ErrBound=%v", tt.name, err, tt.bound)
			}
		}
	}
}

// A Release goes back to the node that recorded the call.
func TestClientReleaseSameNode(t *testing.T) {
	tc := startCluster(t, 3, nil)
	c := dialCluster(t, tc, nil)
	ctx := limiter.WithRelease(context.Background())
	lim := limiter.Limit{Uses: 2, Window: time.Minute}
	// Several keys so the calls land on every node in turn; each release
	// must find its id in the table of the node that answered.
	for i := range 6 {
		key := fmt.Sprint("rel-", i)
		e := []limiter.Entry{{Key: key, Limit: lim, Cost: 2}}
		v, err := c.ConsumeMany(ctx, e)
		if err != nil || !v.Allowed || v.Release == nil {
			t.Fatalf("%s: %+v %v; want allowed with a Release", key, v, err)
		}
		if v, err := c.PeekMany(ctx, e); err != nil || v.Allowed {
			t.Fatalf("%s before release: %+v %v; want refused", key, v, err)
		}
		if err := v.Release(ctx); err != nil {
			t.Fatalf("%s release: %v", key, err)
		}
		if err := v.Release(ctx); err != nil {
			t.Fatalf("%s second release: %v", key, err)
		}
		if v, err := c.PeekMany(ctx, e); err != nil || !v.Allowed {
			t.Fatalf("%s after release: %+v %v; want both uses back", key, v, err)
		}
	}
	// Without WithRelease, no Release.
	v, err := c.ConsumeMany(context.Background(), []limiter.Entry{{Key: "norel", Limit: lim}})
	if err != nil || v.Release != nil {
		t.Fatalf("consume without WithRelease: %+v %v; want no Release", v, err)
	}
}

// Concurrent calls coalesce into fewer Multi RPCs.
func TestClientBatches(t *testing.T) {
	tc := startCluster(t, 1, nil)
	c := dialCluster(t, tc, nil)
	lim := limiter.Limit{Uses: 1000, Window: time.Minute}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Go(func() {
			for i := range 20 {
				if _, err := c.ConsumeMany(context.Background(), []limiter.Entry{{Key: fmt.Sprint("b-", w, "-", i), Limit: lim}}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Calls != 64*20 || st.RPCs >= st.Calls {
		t.Fatalf("stats %+v: want %d calls in fewer RPCs", st, 64*20)
	}
	t.Logf("%d calls in %d RPCs (%.1f per RPC)", st.Calls, st.RPCs, float64(st.Calls)/float64(st.RPCs))
}

func TestClientMembersOwner(t *testing.T) {
	tc := startCluster(t, 3, nil)
	c := dialCluster(t, tc, nil)
	ctx := context.Background()
	ms, err := c.Members(ctx)
	if err != nil || len(ms) != 3 {
		t.Fatalf("Members: %v %v; want 3", ms, err)
	}
	for _, m := range ms {
		if m.Name == "" || m.GRPCAddr == "" || m.GossipAddr == "" || m.State != "alive" {
			t.Errorf("member %+v: want a name, addresses and state alive", m)
		}
	}
	for _, key := range []string{"a", "b", "c", "{tag}x"} {
		m, err := c.Owner(ctx, key)
		want, _ := tc.nodes[0].Owner(key)
		if err != nil || m.Name != want {
			t.Errorf("Owner(%q) = %+v %v; want %s", key, m, err, want)
		}
	}
	var ie *limiter.InputError
	if _, err := c.Owner(ctx, ""); !errors.As(err, &ie) || ie.Field != "key" {
		t.Errorf("Owner(\"\") = %v; want an InputError on key", err)
	}
}

func TestClientConfigAndClose(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		cfg   client.Config
		field string
	}{
		{client.Config{}, "Addrs"},
		{client.Config{Addrs: []string{"127.0.0.1:1", "nohost"}}, "Addrs[1]"},
		{client.Config{Addrs: []string{"127.0.0.1:1"}, Timeout: -1}, "Timeout"},
		{client.Config{Addrs: []string{"127.0.0.1:1"}, Security: client.Security{CertFile: "x"}}, "Security"},
	} {
		var ie *limiter.InputError
		if _, err := client.DialConfig(ctx, tt.cfg); !errors.As(err, &ie) || ie.Field != tt.field {
			t.Errorf("DialConfig(%+v) = %v; want an InputError on %s", tt.cfg, err, tt.field)
		}
	}
	c, err := client.Dial(ctx, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := limiter.Consume(ctx, c, "k", limiter.Limit{Uses: 1, Window: time.Second}); !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("call after Close: %v; want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// The bearer token travels with every call.
func TestClientAuthToken(t *testing.T) {
	tc := startCluster(t, 1, func(cfg *ringlimit.Config) { cfg.Security.AuthToken = "s3cret" })
	lim := limiter.Limit{Uses: 1, Window: time.Second}
	bad := dialCluster(t, tc, nil)
	_, err := limiter.Consume(context.Background(), bad, "k", lim)
	if err == nil {
		t.Fatal("call without the token was answered")
	}
	good := dialCluster(t, tc, func(cfg *client.Config) { cfg.Security.AuthToken = "s3cret" })
	if v, err := limiter.Consume(context.Background(), good, "k", lim); err != nil || !v.Allowed {
		t.Fatalf("call with the token: %+v %v", v, err)
	}
}

// By default the client sends each call to its key's owner, dialling owners it was
// not given: no node forwards.
func TestClientRouteToOwner(t *testing.T) {
	tc := startCluster(t, 3, nil)
	c, err := client.DialConfig(context.Background(), client.Config{
		Addrs: []string{tc.nodes[0].GRPCAddr()}, RingRefresh: 50 * time.Millisecond, Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !c.Routing() {
		if time.Now().After(deadline) {
			t.Fatal("the client never learnt the ring")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := int64(0)
	for _, n := range tc.live() {
		before += n.Peers().Stats().Calls.Load()
	}
	lim := limiter.Limit{Uses: 2, Window: time.Minute}
	owners := map[string]bool{}
	for i := range 30 {
		key := fmt.Sprint("routed-", i)
		o, _ := tc.nodes[0].Owner(key)
		owners[o] = true
		for j, want := range []bool{true, true, false} {
			v, err := limiter.Consume(context.Background(), c, key, lim)
			if err != nil || v.Allowed != want {
				t.Fatalf("%s use %d: %+v %v; want allowed %v", key, j+1, v, err, want)
			}
		}
	}
	after := int64(0)
	for _, n := range tc.live() {
		after += n.Peers().Stats().Calls.Load()
	}
	if len(owners) < 3 || after != before {
		t.Fatalf("keys on %d owners; %d calls forwarded; want 3 owners and none forwarded", len(owners), after-before)
	}
}

// A client's open MultiStream does not hold a node's Close: the node ends
// the stream itself, and the client's next call fails instead of waiting.
func TestNodeCloseEndsClientStreams(t *testing.T) {
	tc := startCluster(t, 1, nil)
	node := tc.live()[0]
	c := dialCluster(t, tc, func(cfg *client.Config) { cfg.RoundRobin = true })
	lim := limiter.Limit{Uses: 5, Window: time.Minute}
	if v, err := limiter.Consume(t.Context(), c, "k", lim); err != nil || !v.Allowed {
		t.Fatalf("consume: %+v, %v", v, err) // the client's stream is open from here
	}
	tc.forget(node)
	closeCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := node.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if closeCtx.Err() != nil {
		t.Fatal("Close took its whole deadline: the client's open stream held the gRPC server")
	}
	if _, err := limiter.Consume(t.Context(), c, "k", lim); !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("a call after the node closed: %v, want an error matching rpc.ErrUnavailable", err)
	}
}
