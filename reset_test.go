package ringlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Reset through a random live node, as the other calls of the cluster's
// conformance run go.
func (a anyNode) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	return a.pick().Reset(ctx, keys, limits...)
}

// A reset made through a node that does not own the keys forgets them at
// their owner (one window, or every window), the refusals the asking
// nodes cached go, and the replicas follow: once the owner crashes, its
// successor still sees the keys reset, while the window that was not
// reset survived (replication itself worked).
func TestResetCluster(t *testing.T) {
	tc := startCluster(t, 3, nil)
	ctx := context.Background()
	n0, n1, victim := tc.nodes[0], tc.nodes[1], tc.nodes[2]
	var one, all []string // reset one window / every window
	for i := 0; len(one)+len(all) < 40; i++ {
		k := fmt.Sprintf("reset-%d", i)
		if o, _ := victim.Owner(k); o != victim.Name() {
			continue
		}
		if len(one) < 20 {
			one = append(one, k)
		} else {
			all = append(all, k)
		}
	}
	l := limiter.Limit{Uses: 2, Window: time.Hour}
	other := limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: time.Hour}
	entries := func(k string, l limiter.Limit) []limiter.Entry { return []limiter.Entry{{Key: k, Limit: l}} }
	for _, k := range append(append([]string(nil), one...), all...) {
		for _, lim := range []limiter.Limit{l, l, other} {
			if v, err := n0.ConsumeMany(ctx, entries(k, lim)); err != nil || !v.Allowed {
				t.Fatalf("filling %s: %+v %v", k, v, err)
			}
		}
		// A refusal that n0 caches.
		if v, _ := n0.ConsumeMany(ctx, entries(k, l)); v.Allowed {
			t.Fatalf("%s: a third use of 2 was allowed", k)
		}
	}
	if err := n1.Reset(ctx, one, l); err != nil {
		t.Fatal(err)
	}
	if err := n1.Reset(ctx, all); err != nil {
		t.Fatal(err)
	}
	// peek answers as the node sees it now (n0 after its cached refusal, or
	// a survivor after the crash: a failure verdict means it still routes
	// to the dead owner, so it asks again).
	peek := func(n *ringlimit.Node, k string, lim limiter.Limit) bool {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			v, err := n.PeekMany(ctx, entries(k, lim))
			if err != nil {
				t.Fatalf("peek %s: %v", k, err)
			}
			if v.Failure == nil {
				return v.Allowed
			}
			if time.Now().After(deadline) {
				t.Fatalf("peek %s: a fallback verdict 5 s on: %v", k, v.Failure)
			}
		}
	}
	check := func(n *ringlimit.Node, when string) {
		t.Helper()
		for _, k := range one {
			if !peek(n, k, l) {
				t.Fatalf("%s: %s is still full through %s after the reset of its window", when, k, n.Name())
			}
			if peek(n, k, other) {
				t.Fatalf("%s: %s lost its other window, which was not reset", when, k)
			}
		}
		for _, k := range all {
			if !peek(n, k, l) || !peek(n, k, other) {
				t.Fatalf("%s: %s still counts after the reset of every window", when, k)
			}
		}
	}
	check(n0, "after the reset")
	waitFor(t, "the owner's replication", victim.Router().ReplicationIdle)
	ringlimit.Crash(victim)
	tc.forget(victim)
	tc.waitMembers(2)
	check(n1, "after the owner crashed")
}

// With a bearer token, Reset needs it like every client method, over gRPC
// and JSON.
func TestResetNeedsToken(t *testing.T) {
	const token = "reset-token"
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.Security.AuthToken = token })
	n0 := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	api := pb.NewLimiterClient(dialPlain(t, n0.GRPCAddr()))
	req := rpc.ResetToPB([]string{"k"}, nil, 0)
	if _, err := api.Reset(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC Reset without the token: %v, want Unauthenticated", err)
	}
	if _, err := api.Reset(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer nope"), req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC Reset with a wrong token: %v, want Unauthenticated", err)
	}
	if _, err := api.Reset(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), req); err != nil {
		t.Fatalf("gRPC Reset with the token: %v", err)
	}
	base := "http://" + n0.HTTPAddr()
	if code, body := httpStatus(t, "POST", base+"/v1/reset", "", `{"keys":["k"]}`); code != 401 {
		t.Fatalf("POST /v1/reset without the token: %d %s, want 401", code, body)
	}
	if code, body := httpStatus(t, "POST", base+"/v1/reset", token, `{"keys":["k"]}`); code != 200 {
		t.Fatalf("POST /v1/reset with the token: %d %s, want 200", code, body)
	}
}
