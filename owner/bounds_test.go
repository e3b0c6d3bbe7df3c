package owner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// boundedRouters starts routers a and b (see startRouters); b's engine (and so
// its replicas, which share its key budget) holds at most maxKeys
// counters, on clock.
func boundedRouters(t *testing.T, maxKeys int, clock limiter.Clock, set func(*Config)) map[string]*Router {
	t.Helper()
	return startRoutersWith(t, func(c *Config) {
		if set != nil {
			set(c)
		}
		if c.Self == "b" {
			e := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1, Bounds: limiter.Bounds{MaxKeys: maxKeys}})
			t.Cleanup(func() { e.Close() })
			c.Engine = e
		}
	}, "a", "b")
}

func logStates(prefix string, n, uses int) []limiter.CounterState {
	out := make([]limiter.CounterState, n)
	for i := range out {
		c := limiter.CounterState{Key: fmt.Sprintf("%s-%d", prefix, i), Algorithm: limiter.SlidingLog, Window: time.Hour}
		for j := range uses {
			c.Log = append(c.Log, limiter.LogUse{At: -int64(j + 1), Cost: 1, ID: uint64(i*uses + j + 1)})
		}
		out[i] = c
	}
	return out
}

func stateRPC(t *testing.T, from *Router, to string, handoff bool, states []limiter.CounterState) (StateAck, error) {
	t.Helper()
	b := StateBatch{From: from.self, States: states}
	if handoff {
		return from.peers.HandOff(t.Context(), to, b)
	}
	return from.peers.Replicate(t.Context(), to, b)
}

// wantInput checks err is an input error naming field: past a bound
// (gRPC's ResourceExhausted) or not (InvalidArgument).
func wantInput(t *testing.T, what string, err error, bound bool, field string) {
	t.Helper()
	var ie *limiter.InputError
	if !errors.As(err, &ie) || ie.Bound != bound || !strings.Contains(ie.Field, field) {
		t.Fatalf("%s: %v, want an input error (bound %v) naming %q", what, err, bound, field)
	}
}

// Issue 17: a node started with --max-keys 10 accepted 50,000 handed-off
// states, and a 200,000-call log for a 5/1h key. Here HandOff keeps the
// bound: of 1,000 states 10 are stored and the RPC fails with
// ResourceExhausted naming keys; a log past --max-log-uses is refused
// whole naming states[0].log, and nothing of its request is stored. (Seen
// failing before the change: b held 1,000 counters and the log.)
func TestHandOffKeepsBounds(t *testing.T) {
	rs := boundedRouters(t, 10, nil, nil)
	a, b := rs["a"], rs["b"]
	_, err := stateRPC(t, a, "b", true, logStates("ho", 1000, 1))
	wantInput(t, "1,000 states to a node bound to 10 keys", err, true, "keys")
	if n := b.engine.Len(); n != 10 {
		t.Fatalf("b holds %d counters, want its bound of 10", n)
	}
	if got := b.stats.HandOffRefused.Load(); got != 990 {
		t.Fatalf("HandOffRefused = %d, want 990", got)
	}
	long := logStates("long", 1, 200_000)
	long = append(logStates("fine", 1, 1), long...)
	rs2 := boundedRouters(t, 0, nil, nil)
	_, err = stateRPC(t, rs2["a"], "b", true, long)
	wantInput(t, "a 200,000-call log", err, true, "states[1].log")
	if n := rs2["b"].engine.Len(); n != 0 {
		t.Fatalf("b stored %d counters of the refused request, want none", n)
	}
	bad := logStates("future", 1, 1)
	bad[0].Log[0].At = int64(2 * time.Hour / time.Microsecond) // the window is an hour
	_, err = stateRPC(t, rs2["a"], "b", true, bad)
	wantInput(t, "a call two hours (two windows) in the future", err, false, "states[0].log[0].age")
}

// Replicate keeps the bound too: replicas count toward --max-keys (one
// budget with the keys the node owns). Past it they are refused, named
// missing (so the owner sends them whole once there is room), counted,
// and the node's own new keys are refused rather than its memory grown.
// The owner's real replicator finds the same. (Seen failing before the
// change: b held every replica and then refused no key of its own.)
func TestReplicateKeepsBounds(t *testing.T) {
	rs := boundedRouters(t, 10, nil, func(c *Config) { c.Replication = 1; c.ReplicationDelay = time.Millisecond })
	a, b := rs["a"], rs["b"]
	resp, err := stateRPC(t, a, "b", false, logStates("rep", 1000, 1))
	if err != nil {
		t.Fatal(err)
	}
	if n := b.replicas.Len(); n != 10 {
		t.Fatalf("b holds %d replicas, want its bound of 10", n)
	}
	if len(resp.Missing) != 990 || b.stats.ReplicasRefused.Load() != 990 {
		t.Fatalf("missing %d, ReplicasRefused %d; want 990 each", len(resp.Missing), b.stats.ReplicasRefused.Load())
	}
	mine := keyOwnedBy(t, b, "b", "own")
	_, err = b.ConsumeMany(t.Context(), []limiter.Entry{{Key: mine, Limit: limiter.Limit{Uses: 5, Window: time.Hour}}})
	if !errors.Is(err, limiter.ErrBound) {
		t.Fatalf("a new key of b's own with the budget full of replicas: %v, want ErrBound", err)
	}
	_, err = stateRPC(t, a, "b", false, logStates("long", 1, 200_000))
	wantInput(t, "a 200,000-call replica", err, true, "states[0].log")

	// The real path: a's replicator ships its keys' changes to b.
	b.replicas.Sweep() // nothing expires: still full
	before := b.stats.ReplicasRefused.Load()
	for i := range 20 {
		k := keyOwnedBy(t, a, "a", fmt.Sprintf("live%d", i))
		if v, err := a.ConsumeMany(t.Context(), []limiter.Entry{{Key: k, Limit: limiter.Limit{Uses: 5, Window: time.Hour}}}); err != nil || !v.Allowed {
			t.Fatalf("consume at a: %+v, %v", v, err)
		}
	}
	waitIdle(t, a)
	if n := b.replicas.Len(); n != 10 {
		t.Fatalf("after a's replication b holds %d replicas, want 10", n)
	}
	if b.stats.ReplicasRefused.Load() <= before {
		t.Fatal("a's replicas past b's bound were not counted as refused")
	}
}

// A legitimate hand-off to a new owner that is full keeps every count:
// the old owner keeps the refused states and retries; meanwhile the new
// owner refuses calls for those keys (it would have to add them), never
// counting them from nothing; once it has room, the retry lands and the
// keys stay at their limit. (Seen failing before the change: the states
// went past b's bound; and with the failed hand-off's put-back removed:
// a lost the refused counters.)
func TestHandOffToFullOwnerKeepsCounts(t *testing.T) {
	clock := limiter.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	rs := boundedRouters(t, 10, clock, nil)
	a, b := rs["a"], rs["b"]
	ctx := context.Background()
	short := limiter.Limit{Uses: 1, Window: time.Minute}
	for i := range 10 {
		if _, err := b.engine.ConsumeMany(ctx, []limiter.Entry{{Key: fmt.Sprintf("b-own-%d", i), Limit: short}}); err != nil {
			t.Fatal(err)
		}
	}
	full := limiter.Limit{Uses: 2, Window: time.Hour}
	var keys []string
	for i := range 5 {
		k := fmt.Sprintf("moving-%d", i)
		keys = append(keys, k)
		for range 2 {
			if v, err := a.engine.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: full}}); err != nil || !v.Allowed {
				t.Fatalf("fill %s at a: %+v, %v", k, v, err)
			}
		}
	}
	onlyB, err := ring.New([]string{"b"}, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if sent := a.handOff(onlyB, false); sent != 0 {
		t.Fatalf("hand-off to a full b sent %d counters, want 0 (refused)", sent)
	}
	if n := a.engine.Len(); n != 5 {
		t.Fatalf("a keeps %d of the 5 refused counters", n)
	}
	if n := b.engine.Len(); n != 10 {
		t.Fatalf("b holds %d counters, want its bound of 10", n)
	}
	for _, k := range keys {
		if _, err := b.engine.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: full}}); !errors.Is(err, limiter.ErrBound) {
			t.Fatalf("a call for %s at full b: %v, want ErrBound (never counted from nothing)", k, err)
		}
	}
	clock.Advance(time.Minute) // b's own keys leave their windows: room
	if sent := a.handOff(onlyB, false); sent != 5 {
		t.Fatalf("the retry sent %d counters, want 5", sent)
	}
	for _, k := range keys {
		v, err := b.engine.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: full}})
		if err != nil || v.Allowed {
			t.Fatalf("%s at b after the hand-off: %+v, %v; want refused (2 of 2 used at a)", k, v, err)
		}
	}
}
