package ringlimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

func manyCalls(prefix string, n int) []*pb.Call {
	calls := make([]*pb.Call, n)
	lim := limiter.Limit{Uses: 5, Window: time.Minute}
	for i := range calls {
		calls[i] = &pb.Call{Entries: rpc.EntriesToPB([]limiter.Entry{{Key: fmt.Sprintf("%s-%d", prefix, i), Limit: lim}})}
	}
	return calls
}

func wantCallsBound(t *testing.T, what string, err error) {
	t.Helper()
	s, _ := status.FromError(err)
	if s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "calls") {
		t.Fatalf("%s: %v, want ResourceExhausted naming calls", what, err)
	}
}

// Issue 17: Limiter/Multi took 100,000 calls in one RPC (100,013 counters,
// RSS 23 -> 102 MB). A request past MaxCalls (default 1024) is refused
// with ResourceExhausted naming calls, before any call runs; a MultiStream
// message past it ends the stream the same way. (Seen failing before the
// change: the node answered and held 100,000 counters.)
func TestMultiCallsBound(t *testing.T) {
	tc := startCluster(t, 1, nil)
	n := tc.nodes[0]
	api := pb.NewLimiterClient(dialPlain(t, n.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // 100,000 calls take a while under -race
	defer cancel()

	_, err := api.Multi(ctx, &pb.MultiRequest{Calls: manyCalls("big", 100_000)})
	wantCallsBound(t, "Multi of 100,000 calls", err)
	_, err = api.Multi(ctx, &pb.MultiRequest{Calls: manyCalls("over", ringlimit.DefaultMaxCalls+1)})
	wantCallsBound(t, "Multi of MaxCalls+1 calls", err)
	if keys := n.Router().Engine().Len(); keys != 0 {
		t.Fatalf("the refused requests left %d counters", keys)
	}
	resp, err := api.Multi(ctx, &pb.MultiRequest{Calls: manyCalls("at", ringlimit.DefaultMaxCalls)})
	if err != nil || len(resp.GetResults()) != ringlimit.DefaultMaxCalls {
		t.Fatalf("Multi of MaxCalls calls: %d results, %v", len(resp.GetResults()), err)
	}

	st, err := api.MultiStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.MultiRequest{Id: 1, Calls: manyCalls("s-ok", 3)}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); err != nil || r.GetId() != 1 || len(r.GetResults()) != 3 {
		t.Fatalf("a stream message of 3 calls: %+v, %v", r, err)
	}
	if err := st.Send(&pb.MultiRequest{Id: 2, Calls: manyCalls("s-big", ringlimit.DefaultMaxCalls+1)}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantCallsBound(t, "a MultiStream message of MaxCalls+1 calls", err)
	if keys := n.Router().Engine().Len(); keys != ringlimit.DefaultMaxCalls+3 {
		t.Fatalf("%d counters, want %d (the allowed requests only)", keys, ringlimit.DefaultMaxCalls+3)
	}
}

// MaxCalls is configurable, and a negative one is a configuration error.
func TestMaxCallsConfig(t *testing.T) {
	tc := startCluster(t, 1, func(c *ringlimit.Config) { c.MaxCalls = 2 })
	api := pb.NewLimiterClient(dialPlain(t, tc.nodes[0].GRPCAddr()))
	_, err := api.Multi(t.Context(), &pb.MultiRequest{Calls: manyCalls("three", 3)})
	wantCallsBound(t, "3 calls with MaxCalls 2", err)
	cfg := nodeConfig("bad")
	cfg.MaxCalls = -1
	_, err = ringlimit.Start(t.Context(), cfg)
	var ie *limiter.InputError
	if !errors.As(err, &ie) || ie.Field != "MaxCalls" {
		t.Fatalf("MaxCalls -1: %v, want an error naming MaxCalls", err)
	}
}

// Issue 18: ringlimit_keys did not count replicas although the README said
// it did (20 keys with one replica gave 3 + 4 + 13 = 20). With the role
// label, the owners' gauges add up to the keys and the replicas' to the
// keys times the replication factor. (Seen failing before the change:
// there was no role label, and the sum was 20 with 20 replicas held.)
func TestKeysGaugeCountsReplicas(t *testing.T) {
	tc := startCluster(t, 3, nil) // one replica by default
	waitRingsAgree(t, tc)
	lim := limiter.Limit{Uses: 5, Window: time.Hour}
	for i := range 20 {
		if v, err := tc.nodes[0].ConsumeMany(t.Context(), []limiter.Entry{{Key: fmt.Sprintf("gauge-%d", i), Limit: lim}}); err != nil || !v.Allowed {
			t.Fatalf("consume: %+v, %v", v, err)
		}
	}
	var owners, replicas float64
	waitFor(t, "every key counted once and replicated once", func() bool {
		owners, replicas = 0, 0
		for _, n := range tc.nodes {
			m := scrape(t, n)
			owners += m[`ringlimit_keys{role="owner"}`]
			replicas += m[`ringlimit_keys{role="replica"}`]
		}
		return owners == 20 && replicas == 20
	})
}

// Replicas count toward --max-keys: a node whose bound is taken by the
// replicas it holds refuses a new key of its own, and counts the
// replicas it refused (ringlimit_replicas_refused_total).
func TestReplicasCountTowardMaxKeys(t *testing.T) {
	tc := startCluster(t, 2, func(c *ringlimit.Config) {
		if c.Name == "node-1" {
			c.Bounds.MaxKeys = 5
		}
	})
	waitRingsAgree(t, tc)
	n0, n1 := tc.nodes[0], tc.nodes[1]
	lim := limiter.Limit{Uses: 5, Window: time.Hour}
	for i := range 10 {
		k := keyOwnedBy(t, n0, n0.Name(), fmt.Sprintf("mine%d", i))
		if v, err := n0.ConsumeMany(t.Context(), []limiter.Entry{{Key: k, Limit: lim}}); err != nil || !v.Allowed {
			t.Fatalf("consume %d at its owner: %+v, %v", i, v, err)
		}
	}
	waitFor(t, "n1 full of n0's replicas, the rest refused", func() bool {
		m := scrape(t, n1)
		return m[`ringlimit_keys{role="replica"}`] == 5 && m[`ringlimit_replicas_refused_total`] > 0
	})
	k := keyOwnedBy(t, n1, n1.Name(), "theirs")
	if _, err := n1.ConsumeMany(t.Context(), []limiter.Entry{{Key: k, Limit: lim}}); !errors.Is(err, limiter.ErrBound) {
		t.Fatalf("a new key at a node full of replicas: %v, want ErrBound", err)
	}
}

// Issue 17 at a node: with 1 s windows the live set stayed under
// --max-keys, yet most calls failed with "the store holds 100000 keys"
// until the 30 s sweep. Here a node with --max-keys 100 on a fake clock
// takes rounds of 80 new keys, one window apart: every call passes. (Seen
// failing before the change at the second round's 21st key.)
func TestMaxKeysCountsLiveKeysAtANode(t *testing.T) {
	clock := limiter.NewFakeClock(time.Unix(1_800_000_000, 0))
	tc := startCluster(t, 1, func(c *ringlimit.Config) { c.Bounds.MaxKeys = 100; c.Clock = clock })
	n := tc.nodes[0]
	lim := limiter.Limit{Uses: 3, Window: time.Second}
	for round := range 10 {
		for i := range 80 {
			v, err := n.ConsumeMany(t.Context(), []limiter.Entry{{Key: fmt.Sprintf("r%d-%d", round, i), Limit: lim}})
			if err != nil || !v.Allowed {
				t.Fatalf("round %d key %d: %+v, %v", round, i, v, err)
			}
		}
		clock.Advance(lim.Window)
	}
	m := scrape(t, n)
	if got := m[`ringlimit_keys{role="owner"}`]; got != 0 {
		t.Fatalf(`ringlimit_keys{role="owner"} = %v once every window passed, want 0`, got)
	}
}
