package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
)

// pureCounter holds one vector's state for the pure functions.
type pureCounter struct {
	log    limiter.LogState
	window limiter.WindowState
	bucket limiter.BucketState
	fixed  limiter.FixedState
	ids    uint64
}

// decide runs one step on the pure functions: Decide, then Record when a
// consume is allowed; for a debit DecideDebit, then Record whatever it
// answered.
func (c *pureCounter) decide(l limiter.Limit, now int64, s storetest.Step) limiter.Outcome {
	var o limiter.Outcome
	switch l.Algorithm {
	case limiter.SlidingLog:
		if s.Debit() {
			o = c.log.DecideDebit(now, l, s.Cost)
		} else {
			o = c.log.Decide(now, l, s.Cost)
		}
		if c.records(o, s) {
			c.ids++
			c.log.Record(now, s.Cost, c.ids)
		}
	case limiter.SlidingWindow:
		if s.Debit() {
			o = c.window.DecideDebit(now, l, s.Cost)
		} else {
			o = c.window.Decide(now, l, s.Cost)
		}
		if c.records(o, s) {
			c.window.Record(s.Cost)
		}
	case limiter.FixedWindow:
		if s.Debit() {
			o = c.fixed.DecideDebit(now, l, s.Cost)
		} else {
			o = c.fixed.Decide(now, l, s.Cost)
		}
		if c.records(o, s) {
			c.fixed.Record(s.Cost)
		}
	default:
		if s.Debit() {
			o = c.bucket.DecideDebit(now, l, s.Cost)
		} else {
			o = c.bucket.Decide(now, l, s.Cost)
		}
		if c.records(o, s) {
			c.bucket.Record(now, l, s.Cost)
		}
	}
	return o
}

// records reports whether step s records: a consume when allowed, a
// debit always, a peek never.
func (c *pureCounter) records(o limiter.Outcome, s storetest.Step) bool {
	return !s.Peek() && (o.Allowed || s.Debit())
}

func TestVectorsPure(t *testing.T) {
	counters := map[string]*pureCounter{}
	storetest.RunVectors(t, func(t *testing.T, v storetest.Vector, base int64, s storetest.Step) limiter.Outcome {
		c := counters[v.Name]
		if c == nil {
			c = &pureCounter{}
			counters[v.Name] = c
		}
		return c.decide(v.LimitAt(s), base+s.At, s)
	})
}

// memoryAt is one vector's Memory, its FakeClock and where the clock stands.
type memoryAt struct {
	m     *limiter.Memory
	clock *limiter.FakeClock
	at    int64
}

func TestVectorsMemory(t *testing.T) {
	stores := map[string]*memoryAt{}
	storetest.RunVerdictVectors(t, func(t *testing.T, v storetest.Vector, base int64, s storetest.Step) limiter.Verdict {
		st := stores[v.Name]
		if st == nil {
			clock := limiter.NewFakeClock(time.UnixMicro(base))
			m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
			t.Cleanup(func() { m.Close() })
			st = &memoryAt{m: m, clock: clock}
			stores[v.Name] = st
		}
		st.clock.Advance(time.Duration(s.At-st.at) * time.Microsecond)
		st.at = s.At
		if got := st.m.Now(); got != base+s.At {
			t.Fatalf("vector %q: the store's clock reads %d, want %d", v.Name, got, base+s.At)
		}
		e := []limiter.Entry{v.EntryAt("vector", s)}
		var verdict limiter.Verdict
		var err error
		if s.Peek() {
			verdict, err = st.m.PeekMany(context.Background(), e)
		} else {
			verdict, err = st.m.ConsumeMany(context.Background(), e)
		}
		if err != nil {
			t.Fatalf("vector %q: %s: %v", v.Name, s, err)
		}
		return verdict
	})
}

// Every vector's steps run forward in time and are valid calls.
func TestVectorsWellFormed(t *testing.T) {
	names := map[string]bool{}
	for _, v := range storetest.Vectors {
		if names[v.Name] {
			t.Errorf("vector %q appears twice", v.Name)
		}
		names[v.Name] = true
		var at int64
		for i, s := range v.Steps {
			if s.At < at {
				t.Errorf("vector %q step %d: at +%dµs goes back from +%dµs", v.Name, i+1, s.At, at)
			}
			at = s.At
			switch s.Op {
			case storetest.OpConsume, storetest.OpPeek, storetest.OpDebit, storetest.OpPeekDebit:
			default:
				t.Errorf("vector %q step %d: op %q", v.Name, i+1, s.Op)
			}
			if err := (limiter.Bounds{}).Check([]limiter.Entry{v.EntryAt("k", s)}); err != nil || s.Cost < 1 {
				t.Errorf("vector %q step %d: not a valid call (cost %d): %v", v.Name, i+1, s.Cost, err)
			}
			if s.Want.Allowed != (s.Want.Wait == 0) {
				t.Errorf("vector %q step %d: Allowed %v with Wait %d", v.Name, i+1, s.Want.Allowed, s.Want.Wait)
			}
		}
	}
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket, limiter.FixedWindow} {
		n := 0
		for _, v := range storetest.Vectors {
			if v.Limit.Algorithm == alg {
				n++
			}
		}
		if n < 4 {
			t.Errorf("%v has %d vectors, want at least 4", alg, n)
		}
	}
}

func TestSlotVectorsMemory(t *testing.T) {
	stores := map[string]*memoryAt{}
	storetest.RunSlotVectors(t, func(t *testing.T, v storetest.Vector, base int64, s storetest.Step) limiter.Verdict {
		st := stores[v.Name]
		if st == nil {
			clock := limiter.NewFakeClock(time.UnixMicro(base))
			m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
			t.Cleanup(func() { m.Close() })
			st = &memoryAt{m: m, clock: clock}
			stores[v.Name] = st
		}
		st.clock.Advance(time.Duration(s.At-st.at) * time.Microsecond)
		st.at = s.At
		e := []limiter.Entry{v.EntryAt("vector", s)}
		ctx := limiter.WithRelease(context.Background())
		var verdict limiter.Verdict
		var err error
		if s.Peek() {
			verdict, err = st.m.PeekMany(ctx, e)
		} else {
			verdict, err = st.m.ConsumeMany(ctx, e)
		}
		if err != nil {
			t.Fatalf("vector %q: %s: %v", v.Name, s, err)
		}
		return verdict
	})
}

// Every slot vector's steps run forward in time, are valid calls, and
// release only earlier consumes.
func TestSlotVectorsWellFormed(t *testing.T) {
	for _, v := range storetest.SlotVectors {
		var at int64
		releases := 0
		for i, s := range v.Steps {
			if s.At < at {
				t.Errorf("vector %q step %d goes back in time", v.Name, i+1)
			}
			at = s.At
			if s.Op == storetest.OpRelease {
				releases++
				if s.Of < 1 || s.Of > i || v.Steps[s.Of-1].Op != storetest.OpConsume {
					t.Errorf("vector %q step %d releases step %d, not an earlier consume", v.Name, i+1, s.Of)
				}
				continue
			}
			if err := (limiter.Bounds{}).Check([]limiter.Entry{v.EntryAt("k", s)}); err != nil || s.Cost < 1 {
				t.Errorf("vector %q step %d: not a valid call: %v", v.Name, i+1, err)
			}
		}
		if v.Limit.Algorithm != limiter.Concurrency || releases == 0 {
			t.Errorf("vector %q: %v with %d releases; want concurrency with some", v.Name, v.Limit.Algorithm, releases)
		}
	}
}
