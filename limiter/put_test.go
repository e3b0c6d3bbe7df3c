package limiter_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Put replaces a sliding log a store already holds (in place) exactly as
// it installs one the store does not hold: duplicates by id merged, uses
// sorted, what left the window trimmed, an empty state a deletion.
func TestPutReplacesLog(t *testing.T) {
	clock := limiter.NewFakeClock(time.Unix(1_000_000, 0))
	held := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	fresh := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer held.Close()
	defer fresh.Close()
	const key = "k"
	w := time.Second
	old := limiter.CounterState{Key: key, Algorithm: limiter.SlidingLog, Window: w, Log: []limiter.LogUse{
		{At: -900_000, Cost: 1, ID: 1}, {At: -100_000, Cost: 2, ID: 2}, {At: -50_000, Cost: 1, ID: 3},
	}}
	held.Import([]limiter.CounterState{old})
	states := []limiter.CounterState{
		{Key: key, Algorithm: limiter.SlidingLog, Window: w, Log: []limiter.LogUse{
			{At: -20_000, Cost: 3, ID: 9}, {At: -1_500_000, Cost: 1, ID: 7}, // out of order; one out of the window
			{At: -300_000, Cost: 1, ID: 8}, {At: -10_000, Cost: 1, ID: 8}, // the same id twice
		}},
	}
	given := append([]limiter.LogUse(nil), states[0].Log...)
	held.Put(states)
	fresh.Put(states)
	if !reflect.DeepEqual(states[0].Log, given) {
		t.Fatalf("Put changed its argument: %v, was %v", states[0].Log, given)
	}
	got, ok1 := held.ExportCounter(key, limiter.SlidingLog, w)
	want, ok2 := fresh.ExportCounter(key, limiter.SlidingLog, w)
	if !ok1 || !ok2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("replaced in place: %+v (%v); installed fresh: %+v (%v)", got, ok1, want, ok2)
	}
	if n := len(got.Log); n != 2 {
		t.Fatalf("uses = %d (%v), want 2: ids 9 and 8 (id 7 left the window, 8 merged)", n, got.Log)
	}
	v, err := held.PeekMany(t.Context(), []limiter.Entry{{Key: key, Limit: limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 10, Window: w}}})
	if err != nil || v.Remaining != 10-4-1 {
		t.Fatalf("peek after Put: %+v, %v; want 5 remaining (costs 3 + 1 held, 1 peeked)", v, err)
	}
	// An empty state deletes.
	held.Put([]limiter.CounterState{{Key: key, Algorithm: limiter.SlidingLog, Window: w}})
	if c, ok := held.ExportCounter(key, limiter.SlidingLog, w); ok {
		t.Fatalf("after an empty Put the store still holds %+v", c)
	}
}
