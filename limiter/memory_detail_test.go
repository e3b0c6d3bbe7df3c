package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/limiter"
)

// fixture is a Memory on a FakeClock standing at an instant aligned to
// every window the tests use (whole hours), with no sweeper.
type fixture struct {
	t     *testing.T
	m     *limiter.Memory
	clock *limiter.FakeClock
	ctx   context.Context
}

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, cfg limiter.MemoryConfig) *fixture {
	t.Helper()
	clock := limiter.NewFakeClock(t0)
	cfg.Clock = clock
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = -1
	}
	m := limiter.NewMemory(cfg)
	t.Cleanup(func() { m.Close() })
	return &fixture{t: t, m: m, clock: clock, ctx: limiter.WithRelease(context.Background())}
}

func (f *fixture) consume(what string, entries ...limiter.Entry) limiter.Verdict {
	f.t.Helper()
	v, err := f.m.ConsumeMany(f.ctx, entries)
	if err != nil {
		f.t.Fatalf("%s: ConsumeMany(%v): %v", what, entries, err)
	}
	return v
}

func (f *fixture) mustAllow(what string, entries ...limiter.Entry) limiter.Verdict {
	f.t.Helper()
	v := f.consume(what, entries...)
	if !v.Allowed || v.Release == nil {
		f.t.Fatalf("%s: refused (or no Release): %+v", what, v)
	}
	return v
}

// remaining peeks one use of e and returns Remaining.
func (f *fixture) remaining(e limiter.Entry) int64 {
	f.t.Helper()
	e.Cost = 1
	v, err := f.m.PeekMany(context.Background(), []limiter.Entry{e})
	if err != nil {
		f.t.Fatal(err)
	}
	return v.Remaining
}

func (f *fixture) release(what string, v limiter.Verdict) {
	f.t.Helper()
	if err := v.Release(context.Background()); err != nil {
		f.t.Fatalf("%s: Release: %v", what, err)
	}
}

func (f *fixture) wantRemaining(what string, e limiter.Entry, want int64) {
	f.t.Helper()
	if got := f.remaining(e); got != want {
		f.t.Fatalf("%s: Peek Remaining = %d, want %d", what, got, want)
	}
}

func TestReleaseSlidingLog(t *testing.T) {
	f := newFixture(t, limiter.MemoryConfig{})
	e := limiter.Entry{Key: "login:ann", Limit: limiter.Limit{Uses: 5, Window: time.Second}}
	two := e
	two.Cost = 2
	a := f.mustAllow("a", e)
	b := f.mustAllow("b (cost 2, same µs)", two)
	c := f.mustAllow("c", e)
	f.wantRemaining("after 4 of 5", e, 0)
	f.release("b", b)
	f.wantRemaining("b gave back exactly its 2", e, 2)
	f.release("b again", b)
	f.wantRemaining("a second release of b", e, 2)
	f.clock.Advance(time.Second)
	d := f.mustAllow("d, after a and c left", e)
	f.release("a, after it left the window", a)
	f.release("c, after it left the window", c)
	f.wantRemaining("releases of uses that left the window", e, 3)
	f.release("d", d)
	f.wantRemaining("d released", e, 4)
	if v := f.consume("refused", limiter.Entry{Key: "other", Limit: limiter.Limit{Uses: 1, Window: time.Second}, Cost: 1}); !v.Allowed {
		t.Fatal("first use of another key refused")
	}
	if v := f.consume("refused", limiter.Entry{Key: "other", Limit: limiter.Limit{Uses: 1, Window: time.Second}}); v.Allowed || v.Release != nil {
		t.Fatalf("a refused verdict: %+v, want refused with no Release", v)
	}
}

func TestReleaseSlidingWindow(t *testing.T) {
	f := newFixture(t, limiter.MemoryConfig{})
	e := limiter.Entry{Key: "k", Limit: limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 4, Window: time.Second}}
	two := e
	two.Cost = 2
	a := f.mustAllow("a (cost 2)", two)
	f.clock.Advance(100 * time.Millisecond)
	b := f.mustAllow("b", e)
	f.release("a", a)
	f.wantRemaining("a released: Curr 1", e, 2)
	f.release("a again", a)
	f.wantRemaining("a released twice", e, 2)
	// Half a window later b is in the previous window, weighted 1.
	f.clock.Advance(1400 * time.Millisecond)
	f.mustAllow("c", e)
	f.wantRemaining("Curr 1 (c) + Prev 1 (b) weighted ceil(0.5)", e, 1)
	f.release("b, now in the previous window", b)
	f.wantRemaining("b released from the previous window", e, 2)
	// Two windows on, c's window is gone: releasing it must not take
	// from the current window's count.
	c := f.mustAllow("c2", e) // counted in the window starting at 1s
	f.clock.Advance(2 * time.Second)
	f.mustAllow("d", e) // window starting at 3s
	f.release("c2, two windows old", c)
	f.wantRemaining("a release from a window that left", e, 2)
}

func TestReleaseTokenBucket(t *testing.T) {
	f := newFixture(t, limiter.MemoryConfig{})
	// 4 per 40ms: one token per 10ms.
	e := limiter.Entry{Key: "k", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 4, Window: 40 * time.Millisecond}}
	two := e
	two.Cost = 2
	a := f.mustAllow("a (cost 2): arrival 20ms", two)
	f.mustAllow("b: arrival 30ms", e)
	f.clock.Advance(15 * time.Millisecond)
	// a's debt ran from 0 to 20ms; at 15ms only 5ms of it is left. A
	// release that gave back a's whole 20ms would free b's uses too.
	f.release("a", a)
	f.wantRemaining("a gave back only its outstanding 5ms (debt 25-15 = 10ms, +10ms = 2 tokens)", e, 2)
	f.release("a again", a)
	f.wantRemaining("a released twice", e, 2)

	g := newFixture(t, limiter.MemoryConfig{})
	a = g.mustAllow("a: arrival 10ms", e)
	b := g.mustAllow("b: arrival 20ms", e)
	g.clock.Advance(15 * time.Millisecond)
	g.release("a, whose debt is paid", a)
	g.wantRemaining("a paid up: nothing back (debt 5ms + 10ms: 2 tokens)", e, 2)
	g.release("b", b)
	g.wantRemaining("b's outstanding 5ms back: full less the peek's own token", e, 3)
}

func TestBatchSameKeyTwice(t *testing.T) {
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			f := newFixture(t, limiter.MemoryConfig{})
			l := limiter.Limit{Algorithm: alg, Uses: 3, Window: time.Hour}
			e := limiter.Entry{Key: "k", Limit: l}
			v := f.mustAllow("the key twice", e, e)
			if v.Remaining != 1 {
				t.Fatalf("the key twice: Remaining %d, want 1 (both costs counted)", v.Remaining)
			}
			if v := f.consume("the key twice more", e, e); v.Allowed || v.Remaining != 1 {
				t.Fatalf("2 more of the last 1: %+v, want refused with Remaining 1", v)
			}
			f.wantRemaining("the refused batch recorded nothing", e, 0)
			// The same counter under a tighter limit: both costs under 2 uses.
			tight := limiter.Entry{Key: "k2", Limit: limiter.Limit{Algorithm: alg, Uses: 2, Window: time.Hour}}
			loose := limiter.Entry{Key: "k2", Limit: l}
			if v := f.consume("loose+tight+tight", loose, tight, tight); v.Allowed {
				t.Fatalf("3 uses of a counter whose tightest limit is 2 passed: %+v", v)
			}
			v = f.mustAllow("loose+tight", loose, tight)
			if v.Remaining != 0 {
				t.Fatalf("loose+tight: Remaining %d, want 0", v.Remaining)
			}
			f.release("loose+tight", v)
			f.wantRemaining("the batch's release gave back both uses", loose, 2)
		})
	}
}

// Concurrent batches over overlapping keys in every order never deadlock
// (shards are locked in one order), and each batch counts atomically.
func TestConcurrentOverlappingBatches(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{Shards: 4, SweepInterval: -1})
	defer m.Close()
	const keys, workers, batches = 12, 6, 400
	l := limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 1 << 40, Window: time.Hour}
	var counts [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range batches {
				n := 1 + r.IntN(5)
				entries := make([]limiter.Entry, n)
				picked := r.Perm(keys)[:n]
				for i, k := range picked {
					entries[i] = limiter.Entry{Key: fmt.Sprintf("key-%d", k), Limit: l}
				}
				v, err := m.ConsumeMany(context.Background(), entries)
				if err != nil || !v.Allowed {
					t.Errorf("batch %v: %+v, %v", picked, v, err)
					return
				}
				for _, k := range picked {
					counts[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		v, err := limiter.Peek(context.Background(), m, fmt.Sprintf("key-%d", k), l)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := l.Uses-1-v.Remaining, counts[k].Load(); got != want {
			t.Errorf("key-%d counted %d uses, want %d", k, got, want)
		}
	}
}

func TestSweepAndExpiry(t *testing.T) {
	f := newFixture(t, limiter.MemoryConfig{})
	log := limiter.Entry{Key: "log", Limit: limiter.Limit{Uses: 2, Window: time.Second}}
	win := limiter.Entry{Key: "win", Limit: limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 2, Window: time.Second}}
	bkt := limiter.Entry{Key: "bkt", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 2, Window: time.Second}}
	f.mustAllow("all three", log, win, bkt)
	// The same key under another window is another counter.
	f.mustAllow("log, 2s", limiter.Entry{Key: "log", Limit: limiter.Limit{Uses: 2, Window: 2 * time.Second}})
	wantLen := func(what string, n int) {
		t.Helper()
		f.m.Sweep()
		if got := f.m.Len(); got != n {
			t.Fatalf("%s: Len() = %d after Sweep, want %d", what, got, n)
		}
	}
	wantLen("just used", 4)
	if _, err := f.m.PeekMany(context.Background(), []limiter.Entry{{Key: "peeked", Limit: log.Limit}}); err != nil {
		t.Fatal(err)
	}
	wantLen("a peek adds no counter", 4)
	f.clock.Advance(499 * time.Millisecond)
	wantLen("at 499ms", 4)
	f.clock.Advance(time.Millisecond)
	wantLen("at 500ms the bucket is full again", 3)
	f.clock.Advance(500 * time.Millisecond)
	wantLen("at 1s the 1s log is empty; the window's use is in the previous window", 2)
	f.clock.Advance(999 * time.Millisecond)
	wantLen("at 1.999s", 2)
	f.clock.Advance(time.Millisecond)
	wantLen("at 2s everything has left", 0)

	// Memory follows the live keys, not the keys ever seen.
	for i := range 1000 {
		f.mustAllow("many", limiter.Entry{Key: fmt.Sprint("many-", i), Limit: bkt.Limit})
	}
	wantLen("1000 keys", 1000)
	f.clock.Advance(time.Second)
	wantLen("1000 keys a window later", 0)
}

func TestSweeperRuns(t *testing.T) {
	clock := limiter.NewFakeClock(t0)
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: time.Millisecond})
	l := limiter.Limit{Uses: 1, Window: time.Second}
	if _, err := limiter.Consume(context.Background(), m, "k", l); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for m.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the sweeper left %d counters after 5s", m.Len())
		}
		time.Sleep(time.Millisecond)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t) // the sweeper is gone once Close returns
}

func TestMaxKeys(t *testing.T) {
	f := newFixture(t, limiter.MemoryConfig{Bounds: limiter.Bounds{MaxKeys: 2}})
	l := limiter.Limit{Uses: 5, Window: time.Second}
	a, b, c := limiter.Entry{Key: "a", Limit: l}, limiter.Entry{Key: "b", Limit: l}, limiter.Entry{Key: "c", Limit: l}
	f.mustAllow("a", a)
	f.mustAllow("b", b)
	_, err := f.m.ConsumeMany(f.ctx, []limiter.Entry{a, c})
	var ie *limiter.InputError
	if !errors.As(err, &ie) || ie.Field != "keys" || !errors.Is(err, limiter.ErrBound) || !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("a third key: error %v, want an *InputError on \"keys\" matching ErrBound", err)
	}
	f.wantRemaining("the refused batch did not count a", a, 3)
	f.mustAllow("a known key still passes", a)
	if v, err := f.m.PeekMany(context.Background(), []limiter.Entry{c}); err != nil || !v.Allowed {
		t.Fatalf("a peek of a new key at the bound: %+v, %v; want allowed", v, err)
	}
	f.clock.Advance(time.Second)
	f.m.Sweep()
	f.mustAllow("c once the others expired", c)
}

func TestClosed(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	e := []limiter.Entry{{Key: "k", Limit: limiter.Limit{Uses: 1, Window: time.Second}}}
	if _, err := m.ConsumeMany(context.Background(), e); !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("ConsumeMany after Close: %v, want ErrClosed", err)
	}
	if _, err := m.PeekMany(context.Background(), e); !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("PeekMany after Close: %v, want ErrClosed", err)
	}
}

func TestContextDone(t *testing.T) {
	f := newFixture(t, limiter.MemoryConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := limiter.Entry{Key: "k", Limit: limiter.Limit{Uses: 2, Window: time.Second}}
	if _, err := f.m.ConsumeMany(ctx, []limiter.Entry{e}); !errors.Is(err, context.Canceled) {
		t.Fatalf("ConsumeMany with a canceled context: %v", err)
	}
	f.wantRemaining("nothing recorded", e, 1)
	v, err := f.m.ConsumeMany(context.Background(), []limiter.Entry{{Key: "k2", Limit: e.Limit}})
	if err != nil || !v.Allowed || v.Release != nil {
		t.Fatalf("without WithRelease: %+v, %v; want allowed with a nil Release", v, err)
	}
}
