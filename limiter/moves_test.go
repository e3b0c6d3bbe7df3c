package limiter_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/limiter"
)

// A token bucket's releases after a move (see limiter.BucketMoves): 4
// tokens per 20 ms (one per 5 ms) on a fake clock.

type movesWorld struct {
	t   *testing.T
	clk *limiter.FakeClock
	m   *limiter.Memory
	l   limiter.Limit
	key string
}

func newMovesWorld(t *testing.T) *movesWorld {
	t.Helper()
	w := &movesWorld{t: t, clk: limiter.NewFakeClock(time.Unix(1_700_000_000, 0)), key: "k",
		l: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 4, Window: 20 * time.Millisecond}}
	w.m = w.newStore(w.clk)
	return w
}

func (w *movesWorld) newStore(clk limiter.Clock) *limiter.Memory {
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clk, SweepInterval: -1})
	w.t.Cleanup(func() { _ = m.Close() })
	return m
}

// take consumes cost tokens on m and returns the receipt; allowed is what
// the step expects.
func (w *movesWorld) take(m *limiter.Memory, step string, cost int64, allowed bool) []limiter.Receipt {
	w.t.Helper()
	v, rs, err := m.ConsumeReceipts(context.Background(), []limiter.Entry{{Key: w.key, Limit: w.l, Cost: cost}}, true)
	if err != nil {
		w.t.Fatalf("%s: Consume(%d): %v", step, cost, err)
	}
	if v.Allowed != allowed {
		w.t.Fatalf("%s: Consume(%d) allowed = %v, want %v (remaining %d)", step, cost, v.Allowed, allowed, v.Remaining)
	}
	return rs
}

func (w *movesWorld) release(m *limiter.Memory, step string, rs []limiter.Receipt) {
	w.t.Helper()
	if err := m.ReleaseReceipts(context.Background(), rs); err != nil {
		w.t.Fatalf("%s: release: %v", step, err)
	}
}

// The brief's case: at 0 calls of 1 and 2, the first released at once
// (the second's tokens move down 5 ms); at 10 ms the bucket is full, 4
// drain it, then the second is released: its tokens lie in the past, so
// nothing comes back, and a fifth call is refused. Before the moves record
// its After (15 ms) gave back 5 ms, one token, and the fifth call passed.
func TestBucketReleaseAfterEarlierRelease(t *testing.T) {
	w := newMovesWorld(t)
	first := w.take(w.m, "0ms: 1", 1, true)
	second := w.take(w.m, "0ms: 2", 2, true)
	w.release(w.m, "0ms: release the 1", first)
	w.clk.Advance(10 * time.Millisecond)
	w.take(w.m, "10ms: 4 (the bucket is full)", 4, true)
	w.release(w.m, "10ms: release the 2", second)
	w.take(w.m, "10ms: a fifth", 1, false)
}

// A receipt recorded after the move is exact: its release gives back all
// of its call still outstanding.
func TestBucketReleaseAfterMoveBeforeIssue(t *testing.T) {
	w := newMovesWorld(t)
	first := w.take(w.m, "0ms: 1", 1, true)
	w.release(w.m, "0ms: release the 1", first)
	second := w.take(w.m, "0ms: 4", 4, true)
	w.take(w.m, "0ms: full", 1, false)
	w.release(w.m, "0ms: release the 4", second)
	w.take(w.m, "0ms: 4 again", 4, true)
}

// A call recorded while a lease holds tokens ends before the arrival
// time it left, by the held tokens: here a direct call released after
// the hold's return (both tokens unused) gets back only what of it is
// still outstanding.
func TestBucketReleaseAfterLeaseReturn(t *testing.T) {
	w := newMovesWorld(t)
	ctx := context.Background()
	if o, err := w.m.GrantBucket(ctx, w.key, w.l, 2, 7, w.clk.Now().UnixMicro()+limiter.Micros(time.Second)); err != nil || !o.Allowed {
		t.Fatalf("grant 2: %+v, %v", o, err)
	}
	// The arrival time is 20 ms, the call's own tokens end at 10 ms: the
	// hold's 2 never refill while held.
	direct := w.take(w.m, "0ms: 2 direct", 2, true)
	if !w.m.ReturnBucket(w.key, w.l, 7, 0) { // both unused
		t.Fatal("return: hold not found")
	}
	w.clk.Advance(10 * time.Millisecond)
	w.take(w.m, "10ms: 4", 4, true)
	w.release(w.m, "10ms: release the direct 2", direct)
	w.take(w.m, "10ms: a fifth", 1, false)
}

// A call recorded while a lease holds tokens: its own tokens refill in
// the held ones' stead (held tokens never refill), so they end held*w/U
// before the arrival time it left, and stay there once the hold ends,
// returned used or expired (its tokens then count as taken, after the
// call's). Here 3 of the 4 are held at 0 and a direct call takes the
// fourth; at 5 ms the call's token has refilled and the holder has spent
// its 3. The call's release gives back nothing, and one call passes at
// 5 ms: 4 uses at that instant, the bucket. With After the arrival time
// (20 ms) the release gave back a whole token and a fifth use passed; so
// it did under a rule that subtracts only the holds still out when the
// call is released.
func TestBucketReleaseAfterHeldReturnedUsed(t *testing.T) {
	for _, end := range []string{"returned", "expired"} {
		t.Run(end, func(t *testing.T) {
			w := newMovesWorld(t)
			ctx := context.Background()
			expiry := w.clk.Now().UnixMicro() + limiter.Micros(time.Second)
			if end == "expired" {
				expiry = w.clk.Now().UnixMicro() + limiter.Micros(5*time.Millisecond)
			}
			if o, err := w.m.GrantBucket(ctx, w.key, w.l, 3, 7, expiry); err != nil || !o.Allowed {
				t.Fatalf("grant 3: %+v, %v", o, err)
			}
			direct := w.take(w.m, "0ms: 1 direct, 3 held", 1, true)
			w.take(w.m, "0ms: full", 1, false)
			w.clk.Advance(5 * time.Millisecond)
			if end == "returned" && !w.m.ReturnBucket(w.key, w.l, 7, 3) { // all 3 spent
				t.Fatal("return: hold not found")
			}
			w.release(w.m, "5ms: release the direct 1 (its token refilled)", direct)
			w.take(w.m, "5ms: 1 (the token that refilled)", 1, true)
			w.take(w.m, "5ms: a fifth", 1, false)
		})
	}
}

// A release stays exact around a lease: a call recorded before the grant
// gets back its whole outstanding part with the hold out, and a call
// recorded under a hold returned unused gets back its own (the return
// moves no call: its unused tokens were never under any).
func TestBucketReleaseAroundHold(t *testing.T) {
	w := newMovesWorld(t)
	ctx := context.Background()
	before := w.take(w.m, "0ms: 2 direct", 2, true)
	if o, err := w.m.GrantBucket(ctx, w.key, w.l, 2, 7, w.clk.Now().UnixMicro()+limiter.Micros(time.Second)); err != nil || !o.Allowed {
		t.Fatalf("grant 2: %+v, %v", o, err)
	}
	w.release(w.m, "0ms: release the 2 recorded before the grant", before)
	under := w.take(w.m, "0ms: 2 under the hold", 2, true)
	w.take(w.m, "0ms: full", 1, false)
	if !w.m.ReturnBucket(w.key, w.l, 7, 0) {
		t.Fatal("return: hold not found")
	}
	w.take(w.m, "0ms: the 2 returned", 2, true)
	w.release(w.m, "0ms: release the 2 recorded under the hold", under)
	w.take(w.m, "0ms: 2 again", 2, true)
	w.take(w.m, "0ms: full again", 1, false)
}

// The record travels with the bucket: a hand-off (TakeCounter, Import on
// a store whose clock reads an hour later) keeps it, so a receipt the old
// owner stamped, released at the new one, still subtracts its moves. The
// bucket is full at the hand-off: its state goes for the record alone.
func TestBucketMovesTravel(t *testing.T) {
	w := newMovesWorld(t)
	first := w.take(w.m, "0ms: 1", 1, true)
	second := w.take(w.m, "0ms: 2", 2, true)
	w.release(w.m, "0ms: release the 1", first)
	w.clk.Advance(10 * time.Millisecond)
	c, ok := w.m.TakeCounter(w.key, limiter.TokenBucket, w.l.Window)
	if !ok || c.Moves.Inc == 0 {
		t.Fatalf("TakeCounter at 10ms = %+v, %v; want the state with its moves record", c, ok)
	}
	if err := limiter.CheckState(&c, limiter.Bounds{}); err != nil {
		t.Fatalf("CheckState(exported): %v", err)
	}
	later := limiter.NewFakeClock(w.clk.Now().Add(time.Hour))
	n := w.newStore(later)
	n.Import([]limiter.CounterState{c})
	n.ImportWithin(nil)
	w.take(n, "10ms at the new owner: 4", 4, true)
	moved := append([]limiter.Receipt(nil), second...)
	for i := range moved {
		moved[i].Shift(limiter.Micros(time.Hour))
	}
	w.release(n, "10ms at the new owner: release the 2", moved)
	w.take(n, "10ms at the new owner: a fifth", 1, false)
}

// Put (a replica taking its owner's state) replaces the record with the
// owner's, as it replaces the bucket; Delete drops it with the bucket.
func TestBucketMovesPutReplaces(t *testing.T) {
	w := newMovesWorld(t)
	first := w.take(w.m, "1", 1, true)
	w.take(w.m, "2", 2, true)
	w.release(w.m, "release the 1", first)
	c, ok := w.m.ExportCounter(w.key, limiter.TokenBucket, w.l.Window)
	if !ok || c.Moves.Inc == 0 || c.Moves.Moved != 5000 || c.Moves.Until != 15000 {
		t.Fatalf("export = %+v; want a record of 5000 µs moved until 15000 µs ahead", c.Moves)
	}
	r := w.newStore(w.clk)
	r.Put([]limiter.CounterState{c})
	got, _ := r.ExportCounter(w.key, limiter.TokenBucket, w.l.Window)
	if got.Moves != c.Moves {
		t.Fatalf("replica's record = %+v, want %+v", got.Moves, c.Moves)
	}
	r.Delete(w.key, limiter.TokenBucket, w.l.Window)
	if got, ok := r.ExportCounter(w.key, limiter.TokenBucket, w.l.Window); ok {
		t.Fatalf("after Delete: %+v", got)
	}
}

// The record goes once its Until is past, and the bucket with it: the key
// expires no later than it would have without the release.
func TestBucketMovesExpire(t *testing.T) {
	w := newMovesWorld(t)
	first := w.take(w.m, "1", 1, true)
	w.take(w.m, "2", 2, true)
	w.release(w.m, "release the 1", first) // arrival time 10 ms, record until 15 ms
	w.clk.Advance(12 * time.Millisecond)
	if n := w.m.Live(); n != 1 {
		t.Fatalf("at 12ms Live() = %d, want 1 (the record holds the bucket)", n)
	}
	w.clk.Advance(3 * time.Millisecond)
	if n := w.m.Live(); n != 0 {
		t.Fatalf("at 15ms Live() = %d, want 0", n)
	}
}

// A stamp ahead of the record (the record lost moves, e.g. a replica that
// had not caught up became the owner) gives nothing back.
func TestBucketReleaseStampAhead(t *testing.T) {
	w := newMovesWorld(t)
	first := w.take(w.m, "1", 1, true)
	w.release(w.m, "release the 1", first)
	second := w.take(w.m, "2", 2, true)
	if second[0].MoveInc == 0 {
		t.Fatal("a receipt recorded while a record exists carries no stamp")
	}
	second[0].Moved += 1000
	w.release(w.m, "release the 2, stamped ahead", second)
	w.take(w.m, "2 more", 2, true)
	w.take(w.m, "full: nothing came back", 1, false)
}

// CheckState names a bad record's field.
func TestBucketMovesCheckState(t *testing.T) {
	base := limiter.CounterState{Key: "k", Algorithm: limiter.TokenBucket, Window: time.Second, Bucket: limiter.BucketState{TAT: 10, Uses: 1}}
	for _, tc := range []struct {
		moves limiter.BucketMoves
		field string
	}{
		{limiter.BucketMoves{Moved: 5}, "moves.inc"},
		{limiter.BucketMoves{Inc: 1, Moved: -1, Until: 5}, "moves.moved"},
		{limiter.BucketMoves{Inc: 1, Until: 1 << 62}, "moves.until"},
	} {
		c := base
		c.Moves = tc.moves
		err := limiter.CheckState(&c, limiter.Bounds{})
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("CheckState(moves %+v) = %v; want an *InputError on %q", tc.moves, err, tc.field)
		}
	}
	c := base
	c.Moves = limiter.BucketMoves{Inc: 1, Moved: 3, Until: 7}
	if err := limiter.CheckState(&c, limiter.Bounds{}); err != nil {
		t.Errorf("CheckState(a good record) = %v", err)
	}
}

// Against a naive model of the timeline (every call's tokens a segment,
// placed in order; a release takes what of its segment lies past now and
// moves every later segment down by as much), Memory never admits a call
// the model has no room for, whatever the releases and lease returns in
// between.
func TestBucketReleaseModelProperty(t *testing.T) {
	const tau = 5000 // µs per token: 4 per 20 ms
	rapid.Check(t, func(rt *rapid.T) {
		w := newMovesWorld(t)
		ctx := context.Background()
		type seg struct {
			end, cost int64
			rs        []limiter.Receipt
			done      bool
		}
		var segs []*seg
		var tat int64 // the model's arrival time (µs)
		now := func() int64 { return w.clk.Now().UnixMicro() }
		tat = now()
		// moveDown moves the segments after i (and the arrival time) down
		// by d.
		moveDown := func(i int, d int64) {
			for _, s := range segs[i+1:] {
				s.end -= d
			}
			tat -= d
		}
		var holds []int64 // the hold ids out (model: a segment each)
		holdSeg := map[uint64]int{}
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0, 1: // consume
				cost := rapid.Int64Range(1, 4).Draw(rt, "cost")
				v, rs, err := w.m.ConsumeReceipts(ctx, []limiter.Entry{{Key: w.key, Limit: w.l, Cost: cost}}, true)
				if err != nil {
					rt.Fatal(err)
				}
				if !v.Allowed {
					continue
				}
				start := max(tat, now())
				if start+cost*tau-now() > 4*tau {
					rt.Fatalf("step %d: Consume(%d) allowed at %d µs; the model's bucket owes %d µs (room for %d µs)", step, cost, now(), start-now(), 4*tau)
				}
				tat = start + cost*tau
				segs = append(segs, &seg{end: tat, cost: cost, rs: rs})
			case 2: // release one call
				if len(segs) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(segs)-1).Draw(rt, "release")
				s := segs[i]
				if s.done || s.rs == nil {
					continue
				}
				s.done = true
				if err := w.m.ReleaseReceipts(ctx, s.rs); err != nil {
					rt.Fatal(err)
				}
				moveDown(i, min(max(s.end-now(), 0), s.cost*tau))
			case 3: // a lease of one token, returned unused later
				id := uint64(len(holds) + 1)
				o, err := w.m.GrantBucket(ctx, w.key, w.l, 1, id, now()+limiter.Micros(time.Hour))
				if err != nil {
					rt.Fatal(err)
				}
				if !o.Allowed {
					continue
				}
				start := max(tat, now())
				if start+tau-now() > 4*tau {
					rt.Fatalf("step %d: GrantBucket(1) allowed; the model's bucket owes %d µs", step, start-now())
				}
				tat = start + tau
				holds = append(holds, int64(id))
				holdSeg[id] = len(segs)
				segs = append(segs, &seg{end: tat, cost: 1, done: true})
			case 4: // return a hold unused, or let time pass
				if len(holds) > 0 && rapid.Bool().Draw(rt, "return") {
					id := uint64(holds[0])
					holds = holds[1:]
					if !w.m.ReturnBucket(w.key, w.l, id, 0) {
						rt.Fatalf("step %d: ReturnBucket(%d) found no hold", step, id)
					}
					// A hold's token does not refill while held: it lies
					// ahead of now until the return, then goes whole.
					// (The model has no floor: it is only more permissive
					// than the store, whose holds keep the bucket lower.)
					i := holdSeg[id]
					moveDown(i, segs[i].cost*tau)
					continue
				}
				w.clk.Advance(time.Duration(rapid.Int64Range(0, 12000).Draw(rt, "µs")) * time.Microsecond)
			}
		}
	})
}

// Leases and direct releases together, against the bound a bucket
// without leases keeps: every use counted at the instant it was made (a
// leased one when its holder spent it, as late as the lease allows),
// every released call as never made, no stretch [a, a+d] holds more
// than B + d*U/w. Holds are returned with any part used, or expire; the
// calls released were recorded before, while and after they were out.
// It is slow to find a release that gives back a held token (a few
// thousand checks with -rapid.checks, the step test above at once).
func TestBucketLeaseReleaseProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newMovesWorld(t)
		w.l.Burst = rapid.SampledFrom([]int64{0, 6}).Draw(rt, "burst")
		ctx := context.Background()
		now := func() int64 { return w.clk.Now().UnixMicro() }
		t0 := now()
		type call struct {
			use
			rs       []limiter.Receipt
			released bool
		}
		type hold struct {
			id       uint64
			k, used  int64
			expiry   int64
			returned bool
		}
		var calls []*call
		var holds []*hold
		direct := func(cost int64) bool {
			v, rs, err := w.m.ConsumeReceipts(ctx, []limiter.Entry{{Key: w.key, Limit: w.l, Cost: cost}}, true)
			if err != nil {
				rt.Fatal(err)
			}
			if v.Allowed {
				calls = append(calls, &call{use: use{at: now() - t0, cost: cost}, rs: rs})
			}
			return v.Allowed
		}
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0: // a direct call
				direct(rapid.Int64Range(1, 3).Draw(rt, "cost"))
			case 1: // a direct call of one
				direct(1)
			case 2: // release a direct call
				var out []*call
				for _, c := range calls {
					if !c.released && c.rs != nil {
						out = append(out, c)
					}
				}
				if len(out) == 0 {
					continue
				}
				c := out[rapid.IntRange(0, len(out)-1).Draw(rt, "release")]
				if err := w.m.ReleaseReceipts(ctx, c.rs); err != nil {
					rt.Fatal(err)
				}
				c.released = true
			case 3: // grant a lease
				k := rapid.Int64Range(1, 3).Draw(rt, "k")
				h := &hold{id: uint64(len(holds) + 1), k: k, expiry: now() + rapid.Int64Range(1, 6).Draw(rt, "tokensLong")*5000 - rapid.Int64Range(0, 1).Draw(rt, "early")}
				o, err := w.m.GrantBucket(ctx, w.key, w.l, k, h.id, h.expiry)
				if err != nil {
					rt.Fatal(err)
				}
				if o.Allowed {
					holds = append(holds, h)
				}
			case 4: // a holder spends from its lease
				var out []*hold
				for _, h := range holds {
					if !h.returned && now() < h.expiry && h.used < h.k {
						out = append(out, h)
					}
				}
				if len(out) == 0 {
					continue
				}
				h := out[rapid.IntRange(0, len(out)-1).Draw(rt, "spend")]
				n := min(rapid.Int64Range(1, 3).Draw(rt, "n"), h.k-h.used)
				h.used += n
				calls = append(calls, &call{use: use{at: now() - t0, cost: n}})
			case 5: // a holder returns its lease (late: it may have expired)
				var out []*hold
				for _, h := range holds {
					if !h.returned {
						out = append(out, h)
					}
				}
				if len(out) == 0 {
					continue
				}
				h := out[rapid.IntRange(0, len(out)-1).Draw(rt, "return")]
				h.returned = true
				w.m.ReturnBucket(w.key, w.l, h.id, h.used)
			case 6:
				// Mostly in half tokens (2500 µs), so refills meet the
				// calls' ends.
				us := rapid.Int64Range(0, 4).Draw(rt, "halfTokens") * 2500
				if rapid.Bool().Draw(rt, "odd") {
					us += rapid.Int64Range(0, 2500).Draw(rt, "µs")
				}
				w.clk.Advance(time.Duration(us) * time.Microsecond)
			}
		}
		var live []use
		for _, c := range calls {
			if !c.released {
				live = append(live, c.use)
			}
		}
		slices.SortStableFunc(live, func(a, b use) int { return cmp.Compare(a.at, b.at) })
		checkAdmissionBound(rt, w.l, live)
	})
}
