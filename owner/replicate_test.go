package owner

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// A successor's replica of each key is exactly its owner's log (the same
// calls, by id and cost) once replication is idle, through new calls
// (shipped as deltas), releases (shipped whole) and more calls after them.
func TestReplicaMatchesOwner(t *testing.T) {
	rs := startRoutersWith(t, func(c *Config) { c.Replication = 1; c.ReplicationDelay = time.Millisecond }, "a", "b", "c")
	a := rs["a"]
	ctx := limiter.WithRelease(context.Background())
	lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 50, Window: time.Hour}
	var keys []string
	for i := range 20 {
		keys = append(keys, keyOwnedBy(t, a, "a", "repl-"+string(rune('a'+i))))
	}
	keys = slices.Compact(keys)
	var releases []func(context.Context) error
	for round := range 8 {
		if round == 6 {
			// The successors lose their replicas (as a restart would): the
			// next deltas find nothing to add to, and the owner ships the
			// keys whole after that.
			for _, k := range keys {
				for _, r := range rs {
					r.replicas.Delete(k, lim.Algorithm, lim.Window)
				}
			}
		}
		for _, k := range keys {
			v, err := a.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: lim}})
			if err != nil || !v.Allowed {
				t.Fatalf("round %d: consume %s: %+v, %v", round, k, v, err)
			}
			releases = append(releases, v.Release)
		}
		if round == 3 {
			for i := 0; i < len(releases); i += 3 {
				if err := releases[i](ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitIdle(t, a)
	}
	for _, k := range keys {
		succ, err := a.ring().Successors(k, 2)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := a.engine.ExportCounter(k, lim.Algorithm, lim.Window)
		got, _ := rs[succ[1]].replicas.ExportCounter(k, lim.Algorithm, lim.Window)
		if !sameCalls(got.Log, want.Log) {
			t.Fatalf("%s: replica on %s holds %d calls %v; owner %d calls %v", k, succ[1], len(got.Log), got.Log, len(want.Log), want.Log)
		}
		if n := len(want.Log); n != 8-2 && n != 8-1 {
			t.Fatalf("%s: owner holds %d calls, want 6 or 7 (8 taken, 1 or 2 given back)", k, n)
		}
	}
}

// sameCalls compares logs by the calls they hold (times differ: each
// export reads its own store's clock).
func sameCalls(a, b []limiter.LogUse) bool {
	return slices.EqualFunc(a, b, func(x, y limiter.LogUse) bool { return x.ID == y.ID && x.Cost == y.Cost })
}

func waitIdle(t *testing.T, r *Router) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !r.repl.idle(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("replication not idle after 5 s")
		}
	}
}
