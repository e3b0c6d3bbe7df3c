package owner

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Calls decides the calls this node owns together (decideHere) with
// exactly Call's outcome: each call all or nothing under its own limit,
// what it recorded replicated to the key's successor, a key that custody
// places on another node counted there and not here, and the calls for
// another owner forwarded. (Checked by hand: without decideHere's
// replication mark the replica check fails; without the custody checks,
// Calls' and decideHere's, the given key is counted on a.)
func TestCallsDecidesHereTogether(t *testing.T) {
	rs := startRoutersWith(t, func(c *Config) { c.Replication = 1; c.ReplicationDelay = time.Millisecond }, "a", "b", "c")
	a := rs["a"]
	// The start's ring change is past its fetch window (as on a node long
	// in service): nothing to fetch, so Calls decides its own together.
	a.moves.cur.Store(nil)
	ctx := context.Background()
	lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 2, Window: time.Hour}
	var mine []string
	for i := range 6 {
		mine = append(mine, keyOwnedBy(t, a, "a", "here-"+strconv.Itoa(i)))
	}
	given := keyOwnedBy(t, a, "a", "given")
	a.custody.Give(given, "b")
	remote := keyOwnedBy(t, a, "b", "remote")

	one := func(k string) limiter.Call { return limiter.Call{Entries: []limiter.Entry{{Key: k, Limit: lim}}} }
	var calls []limiter.Call
	for _, k := range mine {
		calls = append(calls, one(k), one(k), one(k)) // two of three pass
	}
	calls = append(calls,
		// All or nothing: mine[0] is spent by the calls above.
		limiter.Call{Entries: []limiter.Entry{{Key: mine[0], Limit: lim}, {Key: "both-" + mine[1], Limit: lim}}},
		one(given), one(remote), limiter.Call{Entries: []limiter.Entry{{Key: mine[1], Limit: lim}}, Peek: true})
	local := a.Stats().Local.Load()
	out := make([]limiter.CallResult, len(calls))
	a.Calls(ctx, calls, out)

	for i, k := range mine {
		allowed := 0
		for j := range 3 {
			r := out[3*i+j]
			if r.Err != nil {
				t.Fatalf("call %d (%s): %v", 3*i+j, k, r.Err)
			}
			if r.Verdict.Allowed {
				allowed++
			}
		}
		if allowed != 2 {
			t.Errorf("%s: %d of 3 calls allowed under a limit of 2", k, allowed)
		}
	}
	tail := out[3*len(mine):]
	for i, want := range []bool{false, true, true, false} {
		if tail[i].Err != nil || tail[i].Verdict.Allowed != want {
			t.Errorf("call %d: %+v, %v; want allowed %v", 3*len(mine)+i, tail[i].Verdict, tail[i].Err, want)
		}
	}
	if got := a.Stats().Local.Load() - local; got < int64(3*len(mine)) {
		t.Errorf("Stats.Local grew by %d; want at least the %d calls decided here", got, 3*len(mine))
	}
	// The given key was counted on b, as custody says, and not on a.
	if got := leftAfter(t, a, given, lim); got != 1 {
		t.Errorf("%s on a: a consume would leave %d; want 1 (nothing counted: custody gave it to b)", given, got)
	}
	if got := leftAfter(t, rs["b"], given, lim); got != 0 {
		t.Errorf("%s on b: a consume would leave %d; want 0 (one use counted)", given, got)
	}
	if got := leftAfter(t, rs["b"], remote, lim); got != 0 {
		t.Errorf("%s on its owner b: a consume would leave %d; want 0", remote, got)
	}
	// What the calls decided here recorded reaches each key's successor.
	replicatedCalls(t, rs, a, mine, lim, 2)
}

// A call of Calls that asks for Release and goes to its owner gets one
// that gives its use back there; one that does not ask gets none (its
// forward reads no receipts: Call.NoReceipts).
func TestCallsRemoteRelease(t *testing.T) {
	rs := startRouters(t, "a", "b")
	a, b := rs["a"], rs["b"]
	ctx := context.Background()
	lim := limiter.Limit{Uses: 2, Window: time.Hour}
	remote := keyOwnedBy(t, a, "b", "remote")
	entries := []limiter.Entry{{Key: remote, Limit: lim}}
	out := make([]limiter.CallResult, 2)
	a.Calls(ctx, []limiter.Call{{Entries: entries, Release: true}, {Entries: entries}}, out)
	for i, r := range out {
		if r.Err != nil || !r.Verdict.Allowed {
			t.Fatalf("call %d: %+v, %v; want allowed", i, r.Verdict, r.Err)
		}
	}
	if out[1].Verdict.Release != nil {
		t.Error("a call that did not ask for Release got one")
	}
	if out[0].Verdict.Release == nil {
		t.Fatal("a forwarded call that asked for Release got none")
	}
	if err := out[0].Verdict.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := leftAfter(t, b, remote, lim); got != 0 {
		t.Errorf("%s on its owner b after the release: a consume would leave %d; want 0 (one of 2 given back)", remote, got)
	}
}

// Serve decides a forward's calls for keys this node owns together
// (serveHere) with Serve's own outcome: each call under its own limit,
// receipts naming this node for what it recorded, replicated to the key's
// successor; a call past its deadline is not counted, a key custody
// places elsewhere is passed on there, and a key of another owner goes to
// it. (Checked by hand: without serveHere's replication mark the replica
// check fails; without its custody check the given key is counted on a;
// without its deadline check the late call is counted.)
func TestServeDecidesHereTogether(t *testing.T) {
	rs := startRoutersWith(t, func(c *Config) { c.Replication = 1; c.ReplicationDelay = time.Millisecond }, "a", "b", "c")
	a := rs["a"]
	a.moves.cur.Store(nil) // past the start's fetch window
	ctx := context.Background()
	lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 2, Window: time.Hour}
	var mine []string
	for i := range 5 {
		mine = append(mine, keyOwnedBy(t, a, "a", "serve-"+strconv.Itoa(i)))
	}
	given := keyOwnedBy(t, a, "a", "serve-given")
	a.custody.Give(given, "b")
	remote := keyOwnedBy(t, a, "b", "serve-remote")
	late := keyOwnedBy(t, a, "a", "serve-late")

	one := func(k string) Call { return Call{Entries: []limiter.Entry{{Key: k, Limit: lim}}, Hops: 1} }
	var calls []Call
	for _, k := range mine {
		calls = append(calls, one(k), one(k), one(k)) // two of three pass
	}
	lateCall := one(late)
	lateCall.Timeout = time.Nanosecond // spent by the time it is served
	calls = append(calls, one(given), one(remote), lateCall, Call{Entries: []limiter.Entry{{Key: mine[1], Limit: lim}}, Peek: true, Hops: 1})
	served := a.Stats().Served.Load()
	time.Sleep(time.Millisecond)
	results := a.Serve(ctx, "b", calls)

	for i, k := range mine {
		allowed := 0
		for j := range 3 {
			r := results[3*i+j]
			if r.Err != nil {
				t.Fatalf("call %d (%s): %v", 3*i+j, k, r.Err)
			}
			if r.Verdict.Allowed {
				allowed++
				if len(r.Receipts) != 1 || r.Receipts[0].Node != "a" || r.Receipts[0].Key != k {
					t.Errorf("call %d (%s): receipts %+v; want one recorded by a", 3*i+j, k, r.Receipts)
				}
			}
		}
		if allowed != 2 {
			t.Errorf("%s: %d of 3 calls allowed under a limit of 2", k, allowed)
		}
	}
	tail := results[3*len(mine):]
	if tail[0].Err != nil || !tail[0].Verdict.Allowed || tail[1].Err != nil || !tail[1].Verdict.Allowed {
		t.Errorf("the given and the remote key's calls: %+v, %+v; want both allowed", tail[0], tail[1])
	}
	if !errors.Is(tail[2].Err, context.DeadlineExceeded) {
		t.Errorf("the late call: %+v; want context.DeadlineExceeded", tail[2])
	}
	if tail[3].Err != nil || tail[3].Verdict.Allowed || len(tail[3].Receipts) != 0 {
		t.Errorf("the peek of a spent key: %+v; want refused, no receipts", tail[3])
	}
	if got := a.Stats().Served.Load() - served; got < int64(3*len(mine)) {
		t.Errorf("Stats.Served grew by %d; want at least the %d calls decided here", got, 3*len(mine))
	}
	for _, c := range []struct {
		r    *Router
		key  string
		want int64
	}{{a, given, 1}, {rs["b"], given, 0}, {rs["b"], remote, 0}, {a, late, 1}} {
		if got := leftAfter(t, c.r, c.key, lim); got != c.want {
			t.Errorf("%s on %s: a consume would leave %d; want %d", c.key, c.r.self, got, c.want)
		}
	}
	replicatedCalls(t, rs, a, mine, lim, 2)
}

// leftAfter is what a consume of k under lim would leave on r's engine (a
// peek's Remaining), recording nothing.
func leftAfter(t *testing.T, r *Router, k string, lim limiter.Limit) int64 {
	t.Helper()
	v, err := r.engine.PeekMany(context.Background(), []limiter.Entry{{Key: k, Limit: lim}})
	if err != nil {
		t.Fatal(err)
	}
	return v.Remaining
}

// replicatedCalls waits for owner's replication to be idle, then checks
// that each key's log holds n calls on owner and the same calls on its
// successor's replica.
func replicatedCalls(t *testing.T, rs map[string]*Router, owner *Router, keys []string, lim limiter.Limit, n int) {
	t.Helper()
	waitIdle(t, owner)
	for _, k := range keys {
		succ, err := owner.ring().Successors(k, 2)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := owner.engine.ExportCounter(k, lim.Algorithm, lim.Window)
		got, _ := rs[succ[1]].replicas.ExportCounter(k, lim.Algorithm, lim.Window)
		if len(want.Log) != n || !sameCalls(got.Log, want.Log) {
			t.Errorf("%s: replica on %s holds %v; owner %v (want %d calls each)", k, succ[1], got.Log, want.Log, n)
		}
	}
}
