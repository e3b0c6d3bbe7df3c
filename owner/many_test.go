package owner

import (
	"context"
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
	peekOne := func(r *Router, k string) limiter.Verdict {
		t.Helper()
		v, err := r.engine.PeekMany(ctx, []limiter.Entry{{Key: k, Limit: lim}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// (A peek's Remaining is what a consume would leave.)
	if v := peekOne(a, given); v.Remaining != 1 {
		t.Errorf("%s on a: a consume would leave %d; want 1 (nothing counted: custody gave it to b)", given, v.Remaining)
	}
	if v := peekOne(rs["b"], given); v.Remaining != 0 {
		t.Errorf("%s on b: a consume would leave %d; want 0 (one use counted)", given, v.Remaining)
	}
	if v := peekOne(rs["b"], remote); v.Remaining != 0 {
		t.Errorf("%s on its owner b: a consume would leave %d; want 0", remote, v.Remaining)
	}
	// What the calls decided here recorded reaches each key's successor.
	waitIdle(t, a)
	for _, k := range mine {
		succ, err := a.ring().Successors(k, 2)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := a.engine.ExportCounter(k, lim.Algorithm, lim.Window)
		got, _ := rs[succ[1]].replicas.ExportCounter(k, lim.Algorithm, lim.Window)
		if len(want.Log) != 2 || !sameCalls(got.Log, want.Log) {
			t.Errorf("%s: replica on %s holds %v; owner %v (want 2 calls each)", k, succ[1], got.Log, want.Log)
		}
	}
}
