package limiter_test

import (
	"cmp"
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/limiter"
)

// Windows that divide a minute, so two stores whose clocks differ by
// whole minutes align their sliding windows alike.
var exportWindows = []time.Duration{1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20}

// sortStates sorts states and clears the fields of the algorithms a
// state is not for (Export shifts them too, so they hold -now: noise).
func sortStates(states []limiter.CounterState) []limiter.CounterState {
	for i := range states {
		c := &states[i]
		if c.Algorithm != limiter.SlidingLog {
			c.Log = nil
		}
		if c.Algorithm != limiter.SlidingWindow {
			c.Counts = limiter.WindowState{}
		}
		if c.Algorithm != limiter.TokenBucket {
			c.Bucket = limiter.BucketState{}
		}
	}
	slices.SortFunc(states, func(a, b limiter.CounterState) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Algorithm, b.Algorithm), cmp.Compare(a.Window, b.Window))
	})
	return states
}

func all(string) bool { return true }

// State exported from one Memory and imported into another whose clock
// reads minutes later gives the same decisions from then on (time travels
// as ages), and importing it twice changes nothing.
func TestExportImportProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clockA := limiter.NewFakeClock(t0)
		offset := time.Duration(rapid.IntRange(1, 600).Draw(rt, "offset minutes")) * time.Minute
		clockB := limiter.NewFakeClock(t0.Add(offset))
		a := limiter.NewMemory(limiter.MemoryConfig{Clock: clockA, SweepInterval: -1})
		b := limiter.NewMemory(limiter.MemoryConfig{Clock: clockB, SweepInterval: -1})
		defer a.Close()
		defer b.Close()
		type counter struct {
			key   string
			limit limiter.Limit
		}
		var counters []counter
		for i, k := range []string{"a", "b", "c", "d"} {
			counters = append(counters, counter{k, limiter.Limit{
				Algorithm: limiter.Algorithm(i % 3),
				Uses:      rapid.Int64Range(1, 5).Draw(rt, "uses"),
				Window:    rapid.SampledFrom(exportWindows).Draw(rt, "window ms") * time.Millisecond,
			}})
		}
		counters[3].key = "a" // the same key under another algorithm/window
		advance := func(label string) {
			d := time.Duration(rapid.Int64Range(0, 8000).Draw(rt, label)) * time.Microsecond
			clockA.Advance(d)
			clockB.Advance(d)
		}
		step := func(label string) (limiter.Entry, bool) {
			c := rapid.SampledFrom(counters).Draw(rt, label)
			return limiter.Entry{Key: c.key, Limit: c.limit, Cost: rapid.Int64Range(1, c.limit.Uses).Draw(rt, "cost")}, rapid.Bool().Draw(rt, "peek")
		}
		ctx := context.Background()
		// Before the hand-off only a counts.
		for range rapid.IntRange(0, 30).Draw(rt, "steps before") {
			advance("µs before")
			e, _ := step("entry before")
			if _, err := a.ConsumeMany(ctx, []limiter.Entry{e}); err != nil {
				rt.Fatal(err)
			}
		}
		exported := sortStates(a.Export(all, false))
		b.Import(exported)
		b.Import(exported)
		if again := sortStates(b.Export(all, false)); !reflect.DeepEqual(again, exported) {
			rt.Fatalf("imported twice, b holds\n%+v\nwant what a exported\n%+v", again, exported)
		}
		// From now on both see the same calls and must decide alike.
		for i := range rapid.IntRange(1, 40).Draw(rt, "steps after") {
			advance("µs after")
			e, peek := step("entry after")
			call := a.ConsumeMany
			callB := b.ConsumeMany
			if peek {
				call, callB = a.PeekMany, b.PeekMany
			}
			va, err := call(ctx, []limiter.Entry{e})
			if err != nil {
				rt.Fatal(err)
			}
			vb, err := callB(ctx, []limiter.Entry{e})
			if err != nil {
				rt.Fatal(err)
			}
			// b's clock reads offset more: shift its instants back.
			if !vb.RetryAt.IsZero() {
				vb.RetryAt = vb.RetryAt.Add(-offset)
			}
			if !vb.ResetAt.IsZero() {
				vb.ResetAt = vb.ResetAt.Add(-offset)
			}
			if !sameVerdict(va, vb) {
				rt.Fatalf("step %d: %v (peek %v): a says %s, b (clock +%v) says %s", i, e, peek, show(va), offset, show(vb))
			}
		}
	})
}

// Export with remove hands the keys over: they are gone from the source.
func TestExportRemove(t *testing.T) {
	f := newFixture(t, limiter.MemoryConfig{})
	l := limiter.Limit{Uses: 3, Window: time.Second}
	for _, k := range []string{"mine", "yours", "yours2"} {
		f.mustAllow(k, limiter.Entry{Key: k, Limit: l})
	}
	gone := f.m.Export(func(k string) bool { return k != "mine" }, true)
	if len(gone) != 2 || f.m.Len() != 1 {
		t.Fatalf("exported %d counters, %d left; want 2 and 1", len(gone), f.m.Len())
	}
	for _, c := range gone {
		if c.Log[0].At != 0 || c.Window != time.Second || c.Algorithm != limiter.SlidingLog {
			t.Fatalf("exported %+v: want a sliding log whose use is 0µs old", c)
		}
		if c.Counts != (limiter.WindowState{}) || c.Bucket != (limiter.BucketState{}) {
			t.Fatalf("exported %+v: a sliding log's window and bucket fields must stay zero (no clock readings)", c)
		}
	}
	f.clock.Advance(time.Second)
	if got := f.m.Export(all, false); len(got) != 0 {
		t.Fatalf("expired state exported: %+v", got)
	}
	if _, ok := f.m.ExportCounter("mine", limiter.SlidingLog, time.Second); ok {
		t.Fatal("ExportCounter returned an expired counter")
	}
}
