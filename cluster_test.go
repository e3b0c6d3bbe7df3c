package ringlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
	"github.com/ringlimit/ringlimit/rpc"
)

// testCluster is a cluster of in-process nodes on 127.0.0.1 with free
// ports, closed at the end of the test.
type testCluster struct {
	t     testing.TB
	nodes []*ringlimit.Node
	mu    sync.Mutex
}

// quietLogger discards logs unless RINGLIMIT_TEST_LOG is set.
func quietLogger() *slog.Logger {
	if os.Getenv("RINGLIMIT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel()}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func nodeConfig(name string) ringlimit.Config {
	return ringlimit.Config{
		Name:       name,
		GossipAddr: "127.0.0.1:0",
		GRPCAddr:   "127.0.0.1:0",
		HTTPAddr:   "127.0.0.1:0",
		Profile:    "local",
		Logger:     quietLogger(),
		// Generous: on a loaded 2-core machine (tests run in parallel
		// with -race) a 250 ms timeout would hand calls to the fallback
		// policy and blur what the tests check. Tests of the timeout set
		// their own.
		Timeout: 2 * time.Second,
	}
}

func startCluster(t *testing.T, n int, mod func(*ringlimit.Config)) *testCluster {
	return startClusterTB(t, n, mod)
}

// startClusterB is startCluster for benchmarks.
func startClusterB(b *testing.B, n int) *testCluster { return startClusterTB(b, n, nil) }

func startClusterTB(t testing.TB, n int, mod func(*ringlimit.Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t}
	for i := 0; i < n; i++ {
		tc.add(fmt.Sprintf("node-%d", i), mod)
	}
	tc.waitMembers(n)
	return tc
}

// add starts one more node that joins the first.
func (tc *testCluster) add(name string, mod func(*ringlimit.Config)) *ringlimit.Node {
	t := tc.t
	t.Helper()
	cfg := nodeConfig(name)
	cfg.Logger = cfg.Logger.With("node", name)
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

// waitMembers polls until every live node sees want members, and routes
// by a ring of want members.
func (tc *testCluster) waitMembers(want int) {
	tc.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok := true
		for _, n := range tc.live() {
			alive := 0
			for _, m := range n.Members() {
				if m.State == "alive" || m.State == "suspect" {
					alive++
				}
			}
			// The ring calls are routed by changes after the membership
			// (a goroutine rebuilds it, then the router prepares the
			// transition): a test that starts before it did sees its keys
			// move under it, and the failure policy answer.
			if rg := n.Router().RoutingRing(); alive != want || rg == nil || rg.Len() != want {
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
	tc.mu.Lock()
	for i, x := range tc.nodes {
		if x == n {
			tc.nodes = append(tc.nodes[:i], tc.nodes[i+1:]...)
			break
		}
	}
	tc.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		tc.t.Errorf("close %s: %v", n.Name(), err)
	}
}

// forget drops a node from the live list without closing it (it crashed).
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

func isShuttingDown(err error) bool { return errors.Is(err, rpc.ErrShuttingDown) }

// anyNode is a limiter.Store that sends each call to a random node.
type anyNode struct{ tc *testCluster }

func (a anyNode) pick() *ringlimit.Node {
	ns := a.tc.live()
	return ns[rand.IntN(len(ns))]
}

func (a anyNode) ConsumeMany(ctx context.Context, es []limiter.Entry) (limiter.Verdict, error) {
	return a.pick().ConsumeMany(ctx, es)
}

func (a anyNode) PeekMany(ctx context.Context, es []limiter.Entry) (limiter.Verdict, error) {
	return a.pick().PeekMany(ctx, es)
}

func TestClusterConformance(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d-nodes", size), func(t *testing.T) {
			tc := startCluster(t, size, nil)
			storetest.RunWith(t, func(t *testing.T) limiter.Store { return anyNode{tc} }, storetest.Options{Slack: 50 * time.Millisecond})
		})
	}
}

// A batch whose keys live on different owners is all or nothing.
func TestClusterSpreadBatch(t *testing.T) {
	tc := startCluster(t, 3, nil)
	n0 := tc.nodes[0]
	// Find keys owned by three different nodes.
	byOwner := map[string]string{}
	for i := 0; len(byOwner) < 3 && i < 1000; i++ {
		k := fmt.Sprintf("spread-%d", i)
		o, err := n0.Owner(k)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byOwner[o]; !ok {
			byOwner[o] = k
		}
	}
	if len(byOwner) < 3 {
		t.Fatalf("found keys on %d owners, want 3", len(byOwner))
	}
	var keys []string
	for _, k := range byOwner {
		keys = append(keys, k)
	}
	free, spent := limiter.Limit{Uses: 5, Window: time.Minute}, limiter.Limit{Uses: 1, Window: time.Minute}
	ctx := context.Background()
	if v, err := n0.ConsumeMany(ctx, []limiter.Entry{{Key: keys[2], Limit: spent}}); err != nil || !v.Allowed {
		t.Fatalf("spend %s: %+v %v", keys[2], v, err)
	}
	batch := []limiter.Entry{{Key: keys[0], Limit: free}, {Key: keys[1], Limit: free}, {Key: keys[2], Limit: spent}}
	for _, n := range tc.nodes {
		// A verdict of the failure policy (v.Failure) is not the cluster's:
		// a membership blip on a busy machine can move keys under the
		// call. Ask again; the cluster's own answer must be a refusal.
		for deadline := time.Now().Add(10 * time.Second); ; {
			v, err := n.ConsumeMany(ctx, batch)
			if err == nil && v.Failure != nil && time.Now().Before(deadline) {
				t.Logf("batch through %s answered by the failure policy (%v); again", n.Name(), v.Failure)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if err != nil || v.Allowed || v.Failure != nil {
				t.Fatalf("batch through %s: %+v %v; want refused", n.Name(), v, err)
			}
			break
		}
	}
	for _, k := range keys[:2] {
		v, err := tc.nodes[1].PeekMany(ctx, []limiter.Entry{{Key: k, Limit: free, Cost: 5}})
		if err != nil || !v.Allowed {
			t.Fatalf("%s after 3 refused batches: %+v %v; want all 5 uses free (nothing recorded)", k, v, err)
		}
	}
}

// testLogLevel is Info, or Debug when RINGLIMIT_TEST_LOG=debug.
func testLogLevel() slog.Level {
	if os.Getenv("RINGLIMIT_TEST_LOG") == "debug" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// Config.TraceKeys (serve --trace-keys) logs every use admitted for the
// traced keys, and nothing for the others.
func TestTraceKeys(t *testing.T) {
	var buf testenv.LogBuffer
	tc := startCluster(t, 1, func(c *ringlimit.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&buf, nil))
		c.TraceKeys = []string{"traced"}
	})
	ctx := context.Background()
	for _, k := range []string{"traced", "untraced", "traced"} {
		if v, err := tc.nodes[0].ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: limiter.Limit{Uses: 5, Window: time.Minute}}}); err != nil || !v.Allowed {
			t.Fatalf("%s: %+v %v", k, v, err)
		}
	}
	out := buf.String()
	if got := strings.Count(out, `msg="ringlimit: trace" key=traced event="local`); got != 2 {
		t.Errorf("%d traced admissions logged, want 2:\n%s", got, out)
	}
	if strings.Contains(out, "key=untraced") {
		t.Errorf("a key not traced was logged:\n%s", out)
	}
}
