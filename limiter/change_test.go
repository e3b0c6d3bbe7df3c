package limiter_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/limiter"
)

// A replica fed by ExportSince (from the mark of the last export it got)
// or by AppendExportShipped (from the cursor the store keeps), and Put,
// holds exactly what the owner holds, step by step: deltas carry only new
// calls, and whatever else changes the log (a release, a merge, a lost
// shipment) makes the next export whole.
func TestExportSinceSteps(t *testing.T) {
	t.Run("marks", func(t *testing.T) { testExportSteps(t, false) })
	t.Run("cursor", func(t *testing.T) { testExportSteps(t, true) })
}

func testExportSteps(t *testing.T, cursor bool) {
	clock := limiter.NewFakeClock(time.Unix(1_000_000, 0))
	owner := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1, Seed: 1})
	replica := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1, Seed: 2})
	defer owner.Close()
	defer replica.Close()
	const key = "k"
	lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 10, Window: time.Second}
	ctx := limiter.WithRelease(t.Context())
	consume := func() limiter.Verdict {
		t.Helper()
		v, err := owner.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim}})
		if err != nil || !v.Allowed {
			t.Fatalf("consume: %+v, %v", v, err)
		}
		return v
	}
	var first limiter.Verdict
	var mark limiter.LogMark // how far the replica holds the log (without cursor)
	export := func() (limiter.CounterState, bool) {
		if cursor {
			c, ok, _ := owner.AppendExportShipped(nil, key, lim.Algorithm, lim.Window, true)
			return c, ok
		}
		c, next, ok := owner.ExportSince(key, lim.Algorithm, lim.Window, mark)
		mark = next
		return c, ok
	}
	steps := []struct {
		name      string
		do        func()
		wantDelta bool
		wantLog   int // calls the export carries
	}{
		{"first export is whole", func() { first = consume(); consume() }, false, 2},
		{"then only the new call", func() { consume() }, true, 1},
		{"nothing new: an empty delta", func() {}, true, 0},
		{"a release makes it whole", func() {
			if err := first.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			consume()
		}, false, 3},
		{"deltas again", func() { consume(); consume() }, true, 2},
		{"a merge makes it whole", func() {
			owner.Import([]limiter.CounterState{{Key: key, Algorithm: limiter.SlidingLog, Window: time.Second, Log: []limiter.LogUse{{At: -500_000, Cost: 1, ID: 99}}}})
		}, false, 6},
		{"the oldest call leaves: still a delta", func() { clock.Advance(600 * time.Millisecond); consume() }, true, 1},
		{"a lost shipment, its mark forgotten: whole", func() {
			consume()
			if c, _ := export(); !c.Delta {
				t.Fatalf("lost shipment: %+v, want a delta", c)
			}
			mark = limiter.LogMark{}
			owner.ForgetShipped(key, lim.Algorithm, lim.Window)
		}, false, 7},
		{"every call leaves: the counter is gone", func() { clock.Advance(2 * time.Second) }, false, -1},
		{"a new counter starts whole", func() { consume() }, false, 1},
	}
	for i, s := range steps {
		s.do()
		c, ok := export()
		if s.wantLog < 0 {
			if ok {
				t.Fatalf("step %d (%s): ExportSince = %+v, want nothing", i, s.name, c)
			}
			replica.Put([]limiter.CounterState{{Key: key, Algorithm: lim.Algorithm, Window: lim.Window}})
		} else {
			if !ok || c.Delta != s.wantDelta || len(c.Log) != s.wantLog {
				t.Fatalf("step %d (%s): ExportSince = %+v (ok %v), want delta %v with %d calls", i, s.name, c, ok, s.wantDelta, s.wantLog)
			}
			if missing := replica.Put([]limiter.CounterState{c}); len(missing) != 0 {
				t.Fatalf("step %d (%s): the replica misses %v", i, s.name, missing)
			}
		}
		got, gok := replica.ExportCounter(key, lim.Algorithm, lim.Window)
		want, wok := owner.ExportCounter(key, lim.Algorithm, lim.Window)
		if gok != wok || !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d (%s): replica holds %+v (%v), owner %+v (%v)", i, s.name, got, gok, want, wok)
		}
	}
}

// A delta for a counter the replica does not hold is kept, and reported
// missing so the sender ships it whole next.
func TestPutDeltaMissing(t *testing.T) {
	clock := limiter.NewFakeClock(time.Unix(1_000_000, 0))
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
	defer m.Close()
	d := limiter.CounterState{Key: "k", Algorithm: limiter.SlidingLog, Window: time.Second, Delta: true, Log: []limiter.LogUse{{At: -10, Cost: 2, ID: 5}}}
	other := limiter.CounterState{Key: "b", Algorithm: limiter.TokenBucket, Window: time.Second, Bucket: limiter.BucketState{TAT: 100, Uses: 5}}
	if missing := m.Put([]limiter.CounterState{other, d}); !slices.Equal(missing, []int{1}) {
		t.Fatalf("missing = %v, want [1]", missing)
	}
	c, ok := m.ExportCounter("k", limiter.SlidingLog, time.Second)
	if !ok || len(c.Log) != 1 || c.Log[0].ID != 5 || c.Log[0].Cost != 2 {
		t.Fatalf("after a missing delta the store holds %+v (%v), want its one call", c, ok)
	}
	d2 := d
	d2.Log = []limiter.LogUse{{At: -20, Cost: 1, ID: 6}} // older than what is held
	if missing := m.Put([]limiter.CounterState{d2}); len(missing) != 0 {
		t.Fatalf("a second delta: missing %v, want none (now held)", missing)
	}
	if c, _ := m.ExportCounter("k", limiter.SlidingLog, time.Second); len(c.Log) != 2 || c.Log[0].ID != 6 || c.Log[1].ID != 5 {
		t.Fatalf("after a second delta the store holds %+v, want ids 6 then 5 (oldest first)", c.Log)
	}
}

// Random runs of calls, releases, merges, clock steps and shipments, some
// of them lost: after every delivered shipment the replica holds what the
// owner holds.
func TestExportSinceProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clock := limiter.NewFakeClock(time.Unix(1_000_000, 0))
		owner := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1, Seed: 7})
		replica := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1, Seed: 8})
		defer owner.Close()
		defer replica.Close()
		lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 8, Window: 100 * time.Millisecond}
		keys := []string{"a", "b"}
		ctx := limiter.WithRelease(t.Context())
		var releases []func() error
		marks := map[string]limiter.LogMark{} // the replicator's cursor per key
		nextID := uint64(1 << 40)
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0, 1:
				v, err := owner.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim, Cost: rapid.Int64Range(1, 3).Draw(rt, "cost")}})
				if err != nil {
					rt.Fatal(err)
				}
				if v.Allowed {
					rel := v.Release
					releases = append(releases, func() error { return rel(t.Context()) })
				}
			case 2:
				if len(releases) > 0 {
					i := rapid.IntRange(0, len(releases)-1).Draw(rt, "release")
					if err := releases[i](); err != nil {
						rt.Fatal(err)
					}
				}
			case 3:
				nextID++
				owner.Import([]limiter.CounterState{{Key: key, Algorithm: lim.Algorithm, Window: lim.Window,
					Log: []limiter.LogUse{{At: -rapid.Int64Range(0, 150_000).Draw(rt, "age"), Cost: 1, ID: nextID}}}})
			case 4:
				clock.Advance(time.Duration(rapid.Int64Range(1, 60).Draw(rt, "ms")) * time.Millisecond)
			case 5:
				c, next, ok := owner.ExportSince(key, lim.Algorithm, lim.Window, marks[key])
				if rapid.Bool().Draw(rt, "lose") {
					delete(marks, key) // lost: the next export is whole
					continue
				}
				marks[key] = next
				if !ok {
					c = limiter.CounterState{Key: key, Algorithm: lim.Algorithm, Window: lim.Window}
				}
				if missing := replica.Put([]limiter.CounterState{c}); len(missing) != 0 {
					rt.Fatalf("replica misses %s after %+v", key, c)
				}
				got, gok := replica.ExportCounter(key, lim.Algorithm, lim.Window)
				want, wok := owner.ExportCounter(key, lim.Algorithm, lim.Window)
				if gok != wok || !reflect.DeepEqual(got, want) {
					rt.Fatalf("after shipping %+v: replica %+v (%v), owner %+v (%v)", c, got, gok, want, wok)
				}
			}
		}
	})
}
