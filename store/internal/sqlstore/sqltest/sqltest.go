// Package sqltest holds the tests the SQL stores share beyond
// limiter/storetest: limiter's vectors run through a store whose clock is
// pinned, and a differential check against limiter.Memory on identical
// random call sequences.
package sqltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
)

// Pin makes the store read now() instead of its database's clock (nil:
// the database's clock again).
type Pin func(now func() int64)

// Vectors runs limiter/storetest's vectors through s with its clock
// pinned at each step's instant; each vector counts under a key of its
// own.
func Vectors(t *testing.T, s limiter.Store, pin Pin) {
	t.Cleanup(func() { pin(nil) })
	prefix := fmt.Sprintf("vectors-%d/", time.Now().UnixNano())
	storetest.RunVerdictVectors(t, func(t *testing.T, v storetest.Vector, base int64, st storetest.Step) limiter.Verdict {
		now := base + st.At
		pin(func() int64 { return now })
		e := []limiter.Entry{v.EntryAt(prefix+v.Name, st)}
		var verdict limiter.Verdict
		var err error
		if st.Peek() {
			verdict, err = s.PeekMany(context.Background(), e)
		} else {
			verdict, err = s.ConsumeMany(context.Background(), e)
		}
		if err != nil {
			t.Fatalf("vector %q: %s: %v", v.Name, st, err)
		}
		return verdict
	})
}

// SlotVectors runs limiter/storetest's concurrency vectors (acquires
// with WithRelease, releases) through s with its clock pinned at each
// step's instant; each vector counts under a key of its own.
func SlotVectors(t *testing.T, s limiter.Store, pin Pin) {
	t.Cleanup(func() { pin(nil) })
	prefix := fmt.Sprintf("slot-vectors-%d/", time.Now().UnixNano())
	storetest.RunSlotVectors(t, func(t *testing.T, v storetest.Vector, base int64, st storetest.Step) limiter.Verdict {
		now := base + st.At
		pin(func() int64 { return now })
		e := []limiter.Entry{v.EntryAt(prefix+v.Name, st)}
		ctx := limiter.WithRelease(context.Background())
		var verdict limiter.Verdict
		var err error
		if st.Peek() {
			verdict, err = s.PeekMany(ctx, e)
		} else {
			verdict, err = s.ConsumeMany(ctx, e)
		}
		if err != nil {
			t.Fatalf("vector %q: %s: %v", v.Name, st, err)
		}
		return verdict
	})
}

// Differential makes the same random calls (consumes, peeks, debits,
// releases, batches of one to three entries over three keys, costs, token
// buckets with and without a burst, time steps) on
// s with its clock pinned and on limiter.Memory with a FakeClock at the
// same instants, and fails at the first verdict that differs.
func Differential(t *testing.T, s limiter.Store, pin Pin, seeds, steps int) {
	t.Cleanup(func() { pin(nil) })
	algs := []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket, limiter.FixedWindow, limiter.Concurrency}
	for seed := range seeds {
		for _, alg := range algs {
			t.Run(fmt.Sprintf("%v/seed-%d", alg, seed), func(t *testing.T) {
				differential(t, s, pin, alg, uint64(seed), steps)
			})
		}
	}
}

type pair struct{ got, want limiter.Verdict }

func differential(t *testing.T, s limiter.Store, pin Pin, alg limiter.Algorithm, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, uint64(alg)))
	const base = 1704067200_000_000 // 2024-01-01, a multiple of every window below
	clock := limiter.NewFakeClock(time.UnixMicro(base))
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
	defer m.Close()
	now := int64(base)
	pin(func() int64 { return now })
	prefix := fmt.Sprintf("diff-%d-%v-%d/", time.Now().UnixNano(), alg, seed)
	windows := []time.Duration{100 * time.Millisecond, time.Second, 7 * time.Second}
	limits := make([]limiter.Limit, 3)
	for i := range limits {
		limits[i] = limiter.Limit{Algorithm: alg, Uses: 1 + r.Int64N(5), Window: windows[r.IntN(len(windows))]}
		if alg == limiter.TokenBucket && r.IntN(2) == 0 {
			limits[i].Burst = 1 + r.Int64N(8)
		}
	}
	var held []pair
	ctx := limiter.WithRelease(context.Background())
	for step := 1; step <= steps; step++ {
		if d := r.Int64N(4); d > 0 {
			adv := r.Int64N(limiter.Micros(limits[0].Window)/2 + 1)
			now += adv
			clock.Advance(time.Duration(adv) * time.Microsecond)
		}
		if m.Now() != now {
			t.Fatalf("step %d: Memory's clock reads %d, want %d", step, m.Now(), now)
		}
		op := r.IntN(10)
		if op == 0 && len(held) > 0 {
			i := r.IntN(len(held))
			p := held[i]
			held = append(held[:i], held[i+1:]...)
			if err := p.got.Release(context.Background()); err != nil {
				t.Fatalf("step %d: Release: %v", step, err)
			}
			if err := p.want.Release(context.Background()); err != nil {
				t.Fatalf("step %d: Memory Release: %v", step, err)
			}
			continue
		}
		n := 1 + r.IntN(3)
		entries := make([]limiter.Entry, n)
		debit := r.IntN(6) == 0 && alg != limiter.Concurrency // a concurrency limit takes no debit
		for i := range entries {
			k := r.IntN(len(limits))
			l := limits[k]
			entries[i] = limiter.Entry{Key: prefix + fmt.Sprint(k), Limit: l, Cost: 1 + r.Int64N(l.Capacity())}
			if debit {
				entries[i].Debit, entries[i].Cost = true, 1+r.Int64N(2*l.Capacity()+2)
			}
		}
		var got, want limiter.Verdict
		var gerr, werr error
		what := "ConsumeMany"
		if op < 3 {
			what = "PeekMany"
			got, gerr = s.PeekMany(ctx, entries)
			want, werr = m.PeekMany(ctx, entries)
		} else {
			got, gerr = s.ConsumeMany(ctx, entries)
			want, werr = m.ConsumeMany(ctx, entries)
		}
		if gerr != nil || werr != nil {
			t.Fatalf("step %d: %s(%v): error %v, Memory's %v", step, what, entries, gerr, werr)
		}
		if !same(got, want) {
			t.Fatalf("step %d at +%dµs: %s(%v) = %s, Memory says %s", step, now-base, what, entries, show(got), show(want))
		}
		if (got.Release == nil) != (want.Release == nil) {
			t.Fatalf("step %d: Release set %v, Memory's %v", step, got.Release != nil, want.Release != nil)
		}
		if got.Release != nil {
			held = append(held, pair{got, want})
		}
	}
}

func same(a, b limiter.Verdict) bool {
	return a.Allowed == b.Allowed && a.Remaining == b.Remaining && a.RetryAfter == b.RetryAfter &&
		a.RetryAt.Equal(b.RetryAt) && a.ResetAt.Equal(b.ResetAt)
}

func show(v limiter.Verdict) string {
	return fmt.Sprintf("{Allowed:%v Remaining:%d RetryAfter:%v RetryAt:%d ResetAt:%d}",
		v.Allowed, v.Remaining, v.RetryAfter, v.RetryAt.UnixMicro(), v.ResetAt.UnixMicro())
}

// BucketMoves runs a token bucket's releases after a move (see
// limiter.BucketMoves) through s with its clock pinned: 4 tokens per
// 20 ms; at 0 calls of 1 and 2, the first released at once; at 10 ms the
// bucket is full, 4 drain it, and the second's release gives nothing back
// (its tokens moved down to [0, 10 ms]), so a fifth call is refused. Then
// a receipt recorded after the move gives back all of its call, and one
// whose record is gone (the bucket's row and the record's row both
// expired) releases as before any move.
func BucketMoves(t *testing.T, s limiter.Store, pin Pin) {
	t.Cleanup(func() { pin(nil) })
	const base = 1704067200_000_000
	now := int64(base)
	pin(func() int64 { return now })
	key := fmt.Sprintf("moves-%d", time.Now().UnixNano())
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 4, Window: 20 * time.Millisecond}
	ctx := limiter.WithRelease(context.Background())
	step := 0
	take := func(cost int64, allowed bool, what string) limiter.Verdict {
		t.Helper()
		step++
		v, err := s.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: l, Cost: cost}})
		if err != nil {
			t.Fatalf("step %d (%s): %v", step, what, err)
		}
		if v.Allowed != allowed {
			t.Fatalf("step %d at +%dµs (%s): Consume(%d) = %s, want allowed %v", step, now-base, what, cost, show(v), allowed)
		}
		return v
	}
	release := func(v limiter.Verdict, what string) {
		t.Helper()
		if err := v.Release(context.Background()); err != nil {
			t.Fatalf("step %d (%s): Release: %v", step, what, err)
		}
	}
	first := take(1, true, "1 at 0")
	second := take(2, true, "2 at 0")
	release(first, "the 1 at once")
	now += 10_000
	take(4, true, "4 at 10 ms: the bucket is full")
	release(second, "the 2 at 10 ms")
	take(1, false, "a fifth at 10 ms")

	// Recorded after the moves, a receipt is exact.
	now += 100_000 // the bucket full, the record gone
	third := take(1, true, "1 at 110 ms")
	release(third, "the 1 at once")
	fourth := take(4, true, "4 at 110 ms, after a move")
	take(1, false, "full at 110 ms")
	release(fourth, "the 4 at once")
	take(4, true, "4 again at 110 ms")

	// A key's moves record's row is no counter of its own: a reset of
	// every counter of the key takes it in its stride.
	if _, ok := s.(limiter.Resetter); ok {
		err := limiter.Reset(context.Background(), s, []string{key})
		if errors.Is(err, limiter.ErrUnsupported) { // a store that forgets named counters only
			err = limiter.Reset(context.Background(), s, []string{key}, l)
		}
		if err != nil {
			t.Fatalf("Reset(%q) with a moves record held: %v", key, err)
		}
		take(4, true, "4 after the reset")
	}
}
