package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
)

// testCluster is a cluster of in-process nodes on 127.0.0.1 with free
// ports, closed at the end of the test (the root package's, cut to what
// the client's tests use).
type testCluster struct {
	t     testing.TB
	nodes []*ringlimit.Node
	mu    sync.Mutex
}

// quietLogger discards logs unless RINGLIMIT_TEST_LOG is set.
func quietLogger() *slog.Logger {
	if os.Getenv("RINGLIMIT_TEST_LOG") != "" {
		level := slog.LevelInfo
		if os.Getenv("RINGLIMIT_TEST_LOG") == "debug" {
			level = slog.LevelDebug
		}
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startCluster(t *testing.T, n int, mod func(*ringlimit.Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t}
	for i := range n {
		tc.add(fmt.Sprintf("node-%d", i), mod)
	}
	tc.waitMembers(n)
	return tc
}

// add starts one more node that joins the first.
func (tc *testCluster) add(name string, mod func(*ringlimit.Config)) *ringlimit.Node {
	t := tc.t
	t.Helper()
	cfg := ringlimit.Config{
		Name:       name,
		GossipAddr: "127.0.0.1:0",
		GRPCAddr:   "127.0.0.1:0",
		HTTPAddr:   "-",
		Profile:    "local",
		Logger:     quietLogger().With("node", name),
		// Generous: on a loaded 2-core machine (tests run in parallel
		// with -race) a 250 ms timeout would hand calls to the fallback
		// policy and blur what the tests check.
		Timeout: 2 * time.Second,
	}
	tc.mu.Lock()
	if len(tc.nodes) > 0 {
		cfg.Join = []string{tc.nodes[0].GossipAddr()}
	}
	tc.mu.Unlock()
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := ringlimit.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	if err := n.WaitReady(ctx); err != nil {
		t.Fatalf("%s not ready: %v", name, err)
	}
	tc.mu.Lock()
	tc.nodes = append(tc.nodes, n)
	tc.mu.Unlock()
	return n
}

// waitMembers polls until every live node sees want members on its ring.
func (tc *testCluster) waitMembers(want int) {
	tc.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok := true
		for _, n := range tc.live() {
			alive := 0
			for _, m := range n.Members() {
				if m.InRing() {
					alive++
				}
			}
			if alive != want {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("cluster did not converge on %d members", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tc *testCluster) live() []*ringlimit.Node {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return append([]*ringlimit.Node(nil), tc.nodes...)
}

// remove closes a node gracefully and forgets it.
func (tc *testCluster) remove(n *ringlimit.Node) {
	tc.forget(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		tc.t.Errorf("close %s: %v", n.Name(), err)
	}
}

// forget drops a node from the live list without closing it.
func (tc *testCluster) forget(n *ringlimit.Node) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for i, x := range tc.nodes {
		if x == n {
			tc.nodes = append(tc.nodes[:i], tc.nodes[i+1:]...)
			return
		}
	}
}

// dialCluster returns a client of every node of tc, closed at the end of
// the test.
func dialCluster(t *testing.T, tc *testCluster, mod func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{Timeout: 2 * time.Second, Logger: quietLogger()}
	for _, n := range tc.live() {
		cfg.Addrs = append(cfg.Addrs, n.GRPCAddr())
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.DialConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
