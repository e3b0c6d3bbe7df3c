package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Factory returns a store for one test case; it registers its own cleanup.
type Factory func(t *testing.T) limiter.Store

// Options adjust the suite to a store.
type Options struct {
	// Algorithms to check; default all five (Concurrency's cases need
	// Verdict.Release).
	Algorithms []limiter.Algorithm
	// Slack is how far the store's decisions may lag real time (network
	// round trips, a database clock read inside a transaction). Default
	// 30 ms.
	Slack time.Duration
	// NoRelease says the store never sets Verdict.Release; the release
	// cases then check that it stays nil.
	NoRelease bool
	// Serial runs the cases one at a time instead of in parallel.
	Serial bool
	// NoReset says the store cannot forget counters: limiter.Reset must
	// then return an error matching limiter.ErrUnsupported.
	NoReset bool
	// NoResetAll says the store forgets named counters only: a Reset
	// without limits must return an error matching
	// limiter.ErrUnsupported.
	NoResetAll bool
}

// Sizer is implemented by stores that can report the counters they hold
// and drop expired ones at once; the suite then checks that expired keys
// are gone.
type Sizer interface {
	Len() int
	Sweep()
}

// Run runs the whole suite with default options.
func Run(t *testing.T, newStore Factory) { RunWith(t, newStore, Options{}) }

// RunWith runs the whole suite.
func RunWith(t *testing.T, newStore Factory, opts Options) {
	if len(opts.Algorithms) == 0 {
		opts.Algorithms = []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket, limiter.FixedWindow, limiter.Concurrency}
	}
	if opts.Slack == 0 {
		opts.Slack = 30 * time.Millisecond
	}
	run := runID()
	t.Run("input", func(t *testing.T) {
		if !opts.Serial {
			t.Parallel()
		}
		testBadInput(t, newStore(t), run)
	})
	t.Run("window-bounds", func(t *testing.T) {
		if !opts.Serial {
			t.Parallel()
		}
		testWindowBounds(t, newStore(t), run, opts)
	})
	for _, alg := range opts.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			if !opts.Serial {
				t.Parallel()
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					if !opts.Serial {
						t.Parallel()
					}
					s := &suite{t: t, store: newStore(t), alg: alg, opts: opts, prefix: run + "/" + alg.String() + "/" + c.name + "/"}
					c.run(s)
				})
			}
		})
	}
}

func runID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "storetest-" + hex.EncodeToString(b[:])
}

// suite is one case's context.
type suite struct {
	t      *testing.T
	store  limiter.Store
	alg    limiter.Algorithm
	opts   Options
	prefix string
	step   int
}

func (s *suite) key(name string) string { return s.prefix + name }

// room makes sure, for a fixed window, that at least need remains of the
// window of length w the case's calls fall in (windows are aligned to
// the Unix epoch on the store's clock, which for every store of this
// project reads the machine's time): it sleeps to the next window's start
// when less is left. A case's calls then share one window however busy
// the machine, rather than the case failing when a window ends between
// two of them. Other algorithms do not wait.
func (s *suite) room(w, need time.Duration) { s.roomAll(need, w) }

// roomAll is room for several windows at once: a wait for one may take
// another's room, so it checks them all again after a wait, once per
// window at most (a window just started has all the room it can have).
func (s *suite) roomAll(need time.Duration, windows ...time.Duration) {
	if s.alg != limiter.FixedWindow {
		return
	}
	for range windows {
		waited := false
		for _, w := range windows {
			left := w - time.Duration(time.Now().UnixNano()%int64(w))
			if left < need+s.opts.Slack {
				time.Sleep(left + s.opts.Slack)
				waited = true
				break
			}
		}
		if !waited {
			return
		}
	}
}

func (s *suite) limit(uses int64, window time.Duration) limiter.Limit {
	return limiter.Limit{Algorithm: s.alg, Uses: uses, Window: window}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// consume runs one batch and fails the test on an error.
func (s *suite) consume(entries ...limiter.Entry) limiter.Verdict {
	s.t.Helper()
	s.step++
	v, err := s.store.ConsumeMany(limiter.WithRelease(ctx(s.t)), entries)
	if err != nil {
		s.t.Fatalf("step %d: ConsumeMany(%v) error: %v", s.step, entries, err)
	}
	return v
}

func (s *suite) peek(entries ...limiter.Entry) limiter.Verdict {
	s.t.Helper()
	s.step++
	v, err := s.store.PeekMany(ctx(s.t), entries)
	if err != nil {
		s.t.Fatalf("step %d: PeekMany(%v) error: %v", s.step, entries, err)
	}
	return v
}

func (s *suite) want(v limiter.Verdict, allowed bool, what string) {
	s.t.Helper()
	if v.Allowed != allowed {
		s.t.Fatalf("step %d: %s: Allowed = %v, want %v (verdict %s)", s.step, what, v.Allowed, allowed, show(v))
	}
	if !allowed {
		if v.RetryAfter <= 0 {
			s.t.Fatalf("step %d: %s: refused with RetryAfter %v, want > 0", s.step, what, v.RetryAfter)
		}
		if v.RetryAt.IsZero() || v.RetryAt.UnixMicro()%1000 != 0 {
			s.t.Fatalf("step %d: %s: RetryAt %v must be set, in whole milliseconds", s.step, what, v.RetryAt)
		}
	} else if v.ResetAt.IsZero() {
		s.t.Fatalf("step %d: %s: allowed with no ResetAt", s.step, what)
	}
}

func show(v limiter.Verdict) string {
	return fmt.Sprintf("{Allowed:%v Remaining:%d RetryAfter:%v RetryAt:%d ResetAt:%d Failure:%v}",
		v.Allowed, v.Remaining, v.RetryAfter, v.RetryAt.UnixMilli(), v.ResetAt.UnixMilli(), v.Failure)
}

// sleepPast sleeps through a refusal's wait plus the store's slack.
func (s *suite) sleepPast(v limiter.Verdict) {
	time.Sleep(v.RetryAfter + s.opts.Slack)
}

type testCase struct {
	name string
	run  func(s *suite)
}

var cases = []testCase{
	{"slides", testSlides},
	{"retry-after-oldest", testRetryAfterOldest},
	{"retry-at-stable", testRetryAtStable},
	{"keys-independent", testKeysIndependent},
	{"same-millisecond", testSameMillisecond},
	{"concurrent-at-limit", testConcurrentAtLimit},
	{"batch-all-entries", testBatchAllEntries},
	{"batch-refused-records-nothing", testBatchRefusedRecordsNothing},
	{"concurrent-batches", testConcurrentBatches},
	{"peek", testPeek},
	{"release", testRelease},
	{"cost", testCost},
	{"expiry", testExpiry},
	{"debit", testDebit},
	{"burst", testBurst},
	{"reset", testReset},
	{"slots", testSlots},
	{"bucket-release-moved", testBucketReleaseMoved},
}

// A concurrency limit's slot is held until its Release (idempotent, and
// freeing only its own slot) or its TTL; other algorithms skip this.
// limiter.Acquire works on the store.
func testSlots(s *suite) {
	if s.alg != limiter.Concurrency {
		s.t.Skip("only a concurrency limit holds slots")
	}
	if s.opts.NoRelease {
		s.t.Skip("the store cannot release")
	}
	k, l := s.key("k"), s.limit(2, 2*time.Second)
	e := limiter.Entry{Key: k, Limit: l}
	// A sliding log of the same key and window is another counter.
	s.want(s.consume(limiter.Entry{Key: k, Limit: limiter.Limit{Uses: 2, Window: l.Window}, Cost: 2}), true, "a sliding log of the same key and window")
	first := s.consume(e)
	s.want(first, true, "first slot")
	second := s.consume(e)
	s.want(second, true, "second slot")
	s.want(s.consume(e), false, "a third slot of 2")
	if first.Release == nil || second.Release == nil {
		s.t.Fatalf("step %d: an allowed acquire under WithRelease has no Release", s.step)
	}
	if err := first.Release(ctx(s.t)); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	third := s.consume(e)
	s.want(third, true, "a slot after a release")
	if err := first.Release(ctx(s.t)); err != nil {
		s.t.Fatalf("second Release: %v", err)
	}
	s.want(s.consume(e), false, "a second Release of one slot frees no other")
	release, v, err := limiter.Acquire(ctx(s.t), s.store, k, l.Uses, l.Window)
	if err != nil || v.Allowed {
		s.t.Fatalf("Acquire on a full limit: %s, %v; want refused", show(v), err)
	}
	if err := release(ctx(s.t)); err != nil {
		s.t.Fatalf("a refused Acquire's release: %v", err)
	}
	// A holder that vanished: its slot frees at the TTL.
	k2 := s.key("ttl")
	short := s.limit(1, 300*time.Millisecond)
	release, v, err = limiter.Acquire(ctx(s.t), s.store, k2, short.Uses, short.Window)
	if err != nil || !v.Allowed {
		s.t.Fatalf("Acquire: %s, %v", show(v), err)
	}
	_ = release // never called: the holder vanished
	v = s.consume(limiter.Entry{Key: k2, Limit: short})
	s.want(v, false, "the slot of a holder that vanished, before its TTL")
	s.sleepPast(v)
	s.want(s.consume(limiter.Entry{Key: k2, Limit: short}), true, "after the TTL")
}

// A debit counts whatever the budget says: past the limit and above Uses.
// Its verdict is allowed while the budget was not already exceeded; later
// calls are refused until the window has room again; a peek of a debit
// records nothing; a debit has no Release.
func testDebit(s *suite) {
	k, l := s.key("k"), s.limit(3, 20*time.Second)
	if s.alg == limiter.Concurrency {
		// Slots are held by calls in flight; a debit after the fact holds
		// none, so it is refused, naming the field.
		_, err := s.store.ConsumeMany(ctx(s.t), []limiter.Entry{{Key: k, Limit: l, Debit: true}})
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != "entries[0].debit" {
			s.t.Fatalf("a debit on a concurrency limit: %v; want an *InputError naming entries[0].debit", err)
		}
		return
	}
	s.room(l.Window, 5*time.Second)
	s.want(s.consume(limiter.Entry{Key: k, Limit: l}), true, "first use")
	d := limiter.Entry{Key: k, Limit: l, Cost: 5, Debit: true}
	if p := s.peek(d); !p.Allowed || p.Remaining != 0 {
		s.t.Fatalf("step %d: peek of a debit of 5 with 2 left: %s, want allowed, 0 left", s.step, show(p))
	}
	if p := s.peek(limiter.Entry{Key: k, Limit: l, Cost: 2}); !p.Allowed {
		s.t.Fatalf("step %d: after the peek of a debit: %s, want 2 uses still free (a peek records nothing)", s.step, show(p))
	}
	v := s.consume(d)
	s.want(v, true, "debit of 5 with 2 left (not exceeded before it)")
	if v.Remaining != 0 || v.Release != nil {
		s.t.Fatalf("step %d: debit: %s, Release set %v; want 0 left and no Release", s.step, show(v), v.Release != nil)
	}
	s.want(s.consume(limiter.Entry{Key: k, Limit: l}), false, "a use after the debit")
	v = s.consume(limiter.Entry{Key: k, Limit: l, Cost: 1, Debit: true})
	s.want(v, false, "a debit once the budget is exceeded")
	if v.Release != nil {
		s.t.Fatalf("step %d: a refused debit carries a Release", s.step)
	}
	// The refused debit was counted too: the budget stays exceeded.
	s.want(s.consume(limiter.Entry{Key: k, Limit: l}), false, "a use after the refused debit")
	if s.alg == limiter.SlidingLog {
		// 1+5+1 uses of 3: the first two must leave before one more passes.
		if p := s.peek(limiter.Entry{Key: k, Limit: l}); p.RetryAfter < l.Window-5*time.Second {
			s.t.Fatalf("step %d: RetryAfter %v after 7 uses of 3, want most of the %v window", s.step, p.RetryAfter, l.Window)
		}
	}
	// A batch of debits counts every entry.
	k2 := s.key("k2")
	v = s.consume(limiter.Entry{Key: k, Limit: l, Cost: 1, Debit: true}, limiter.Entry{Key: k2, Limit: l, Cost: 2, Debit: true})
	s.want(v, false, "a batch of debits with one key exceeded")
	if p := s.peek(limiter.Entry{Key: k2, Limit: l, Cost: 1}); !p.Allowed || p.Remaining != 0 {
		s.t.Fatalf("step %d: the batch's other key: %s, want its debit of 2 counted (1 left, 0 after this)", s.step, show(p))
	}
}

// A token bucket's Burst is its capacity, apart from its rate: burst=5 at
// 2 per 10s takes 5 at once, then refills one use every 5s. Other
// algorithms refuse a burst (testBadInput).
func testBurst(s *suite) {
	if s.alg != limiter.TokenBucket {
		s.t.Skip("only a token bucket takes a burst")
	}
	k := s.key("k")
	l := s.limit(2, 10*time.Second)
	l.Burst = 5
	v := s.consume(limiter.Entry{Key: k, Limit: l, Cost: 5})
	s.want(v, true, "the whole burst at once")
	if v.Remaining != 0 {
		s.t.Fatalf("step %d: Remaining %d after the burst, want 0", s.step, v.Remaining)
	}
	v = s.consume(limiter.Entry{Key: k, Limit: l})
	s.want(v, false, "a use past the burst")
	// One use refills in Window/Uses = 5s, not Window/Burst = 2s.
	if v.RetryAfter > 5*time.Second+s.opts.Slack || v.RetryAfter < 4*time.Second {
		s.t.Fatalf("step %d: RetryAfter %v, want about 5s (one use at 2 per 10s)", s.step, v.RetryAfter)
	}
	// The same key under a burst of 1 (the rate's own capacity is 2):
	// the state is kept, and the tighter capacity counts.
	narrow := l
	narrow.Burst = 1
	s.want(s.consume(limiter.Entry{Key: k, Limit: narrow}), false, "the spent bucket under a smaller burst")
	fresh := s.key("fresh")
	s.want(s.consume(limiter.Entry{Key: fresh, Limit: narrow}), true, "a fresh bucket of 1")
	s.want(s.consume(limiter.Entry{Key: fresh, Limit: narrow}), false, "the bucket of 1 is spent")
}

// The window slides: at the limit a call is refused, and once the refusal's
// wait is over a call passes again.
func testSlides(s *suite) {
	l := s.limit(3, 400*time.Millisecond)
	var k string
	var v limiter.Verdict
	s.inSpan(l, l.Window/2, func(attempt int) {
		k = s.key(fmt.Sprint("k", attempt))
		for i := 0; i < 3; i++ {
			s.want(s.consume(limiter.Entry{Key: k, Limit: l}), true, fmt.Sprintf("use %d of 3", i+1))
		}
		v = s.consume(limiter.Entry{Key: k, Limit: l})
	})
	s.want(v, false, "4th use")
	longest := l.Window
	if s.alg == limiter.SlidingWindow {
		longest = 2 * l.Window // the previous window's weight must decay too
	}
	if v.RetryAfter > longest+s.opts.Slack {
		s.t.Fatalf("step %d: RetryAfter %v is longer than %v", s.step, v.RetryAfter, longest)
	}
	if v.Remaining != 0 {
		s.t.Fatalf("step %d: refused with Remaining %d, want 0", s.step, v.Remaining)
	}
	s.sleepPast(v)
	s.want(s.consume(limiter.Entry{Key: k, Limit: l}), true, "after RetryAfter")
}

// RetryAfter counts from the oldest use still in the window (sliding log),
// from one token's refill (token bucket), and never beyond two windows
// (sliding window).
func testRetryAfterOldest(s *suite) {
	l := s.limit(2, 600*time.Millisecond)
	var k string
	var start time.Time
	var v limiter.Verdict
	s.inSpan(l, 400*time.Millisecond, func(attempt int) {
		k = s.key(fmt.Sprint("k", attempt))
		start = time.Now()
		s.want(s.consume(limiter.Entry{Key: k, Limit: l}), true, "first use")
		time.Sleep(150 * time.Millisecond)
		s.want(s.consume(limiter.Entry{Key: k, Limit: l}), true, "second use")
		v = s.consume(limiter.Entry{Key: k, Limit: l})
	})
	s.want(v, false, "third use")
	elapsed := time.Since(start)
	switch s.alg {
	case limiter.SlidingLog, limiter.Concurrency: // a slot frees at its TTL like a log's use
		// The oldest use leaves at start+600ms: the wait is at most
		// 600ms - 150ms, not 600ms from the second use.
		if max := l.Window - 150*time.Millisecond + s.opts.Slack; v.RetryAfter > max {
			s.t.Fatalf("step %d: RetryAfter %v, want <= %v (counted from the oldest use)", s.step, v.RetryAfter, max)
		}
		if min := l.Window - elapsed - s.opts.Slack; v.RetryAfter < min {
			s.t.Fatalf("step %d: RetryAfter %v, want >= %v", s.step, v.RetryAfter, min)
		}
	case limiter.FixedWindow:
		// The window ends at most 600ms - 150ms after the second use.
		if max := l.Window - 150*time.Millisecond + s.opts.Slack; v.RetryAfter > max {
			s.t.Fatalf("step %d: RetryAfter %v, want <= %v (the window's end)", s.step, v.RetryAfter, max)
		}
	case limiter.TokenBucket:
		// One token comes back every 300ms; 150ms of it already passed.
		if max := l.Window/2 - 150*time.Millisecond + s.opts.Slack; v.RetryAfter > max {
			s.t.Fatalf("step %d: RetryAfter %v, want <= %v (one token's refill)", s.step, v.RetryAfter, max)
		}
	default:
		if v.RetryAfter > 2*l.Window {
			s.t.Fatalf("step %d: RetryAfter %v, want <= two windows", s.step, v.RetryAfter)
		}
	}
	s.sleepPast(v)
	s.want(s.consume(limiter.Entry{Key: k, Limit: l}), true, "after the wait")
}

// refusedSpan is how long after a key's first use its spent limit l is
// still certain to refuse: a sliding log until that use leaves the window;
// a token bucket only until one use's share of the window has refilled, and
// a sliding window likewise (a call just past a window boundary sees the
// previous counter weighted down by that share); a fixed window for the
// room the case made (room).
func (s *suite) refusedSpan(l limiter.Limit, room time.Duration) time.Duration {
	switch s.alg {
	case limiter.SlidingLog, limiter.Concurrency:
		return l.Window
	case limiter.FixedWindow:
		return room
	}
	return l.Window / time.Duration(l.Uses)
}

// spanAttempts bounds inSpan's attempts.
const spanAttempts = 10

// inSpan runs steps, which spend a fresh key (named by attempt) and make
// the call that must be refused, until they took less than refusedSpan
// from the first call to the last answer: only then is the refusal
// certain. Each attempt first makes need of room in a fixed window (room).
// A busy machine can stall any step for longer (the token bucket of
// testSlides refills one use every 133 ms), so a slower attempt is
// repeated rather than judged; the case fails when every attempt was slow.
func (s *suite) inSpan(l limiter.Limit, need time.Duration, steps func(attempt int)) {
	s.t.Helper()
	span := s.refusedSpan(l, need)
	for attempt := 0; attempt < spanAttempts; attempt++ {
		s.room(l.Window, need)
		start := time.Now()
		steps(attempt)
		took := time.Since(start)
		if took < span {
			return
		}
		s.t.Logf("attempt %d took %v, longer than the %v its refusal is certain for: again with a fresh key", attempt+1, took.Round(time.Millisecond), span)
	}
	s.t.Fatalf("all %d attempts took longer than the %v a refusal is certain for: the store (or the machine) is too slow to judge", spanAttempts, span)
}

// Every refusal inside one wait names the same RetryAt, and a refusal
// costs no quota.
func testRetryAtStable(s *suite) {
	k, l := s.key("k"), s.limit(1, 2*time.Second)
	s.room(l.Window, time.Second)
	s.want(s.consume(limiter.Entry{Key: k, Limit: l}), true, "first use")
	first := s.consume(limiter.Entry{Key: k, Limit: l})
	s.want(first, false, "second use")
	for i := 0; i < 3; i++ {
		time.Sleep(25 * time.Millisecond)
		v := s.consume(limiter.Entry{Key: k, Limit: l})
		s.want(v, false, "refusal inside the wait")
		if !v.RetryAt.Equal(first.RetryAt) {
			s.t.Fatalf("step %d: RetryAt %d, want %d as at the first refusal", s.step, v.RetryAt.UnixMilli(), first.RetryAt.UnixMilli())
		}
		if v.RetryAfter >= first.RetryAfter {
			s.t.Fatalf("step %d: RetryAfter %v did not shrink from %v", s.step, v.RetryAfter, first.RetryAfter)
		}
	}
	p := s.peek(limiter.Entry{Key: k, Limit: l})
	if !p.RetryAt.Equal(first.RetryAt) {
		s.t.Fatalf("step %d: Peek RetryAt %d, want %d", s.step, p.RetryAt.UnixMilli(), first.RetryAt.UnixMilli())
	}
}

// Keys are independent, and so are two windows of one key.
func testKeysIndependent(s *suite) {
	l := s.limit(1, 5*time.Second)
	s.room(l.Window, 2*time.Second)
	s.want(s.consume(limiter.Entry{Key: s.key("a"), Limit: l}), true, "a")
	s.want(s.consume(limiter.Entry{Key: s.key("a"), Limit: l}), false, "a again")
	s.want(s.consume(limiter.Entry{Key: s.key("b"), Limit: l}), true, "b")
	s.want(s.consume(limiter.Entry{Key: s.key("a"), Limit: s.limit(1, 6*time.Second)}), true, "a under another window")
	// Keys are opaque bytes.
	// Keys are opaque bytes, up to the default bound of 1 KiB.
	longest := s.key("") + strings.Repeat("z", 1024-len(s.key("")))
	for _, k := range []string{s.key("\x00"), s.key("ä/ü:{tag}"), s.key("\xff\xfe"), longest} {
		s.want(s.consume(limiter.Entry{Key: k, Limit: l}), true, fmt.Sprintf("key %q", k))
	}
}

// Uses made in the same millisecond stay distinct.
func testSameMillisecond(s *suite) {
	k, l := s.key("k"), s.limit(5, 10*time.Second)
	s.room(l.Window, 3*time.Second)
	var wg sync.WaitGroup
	var passed atomic.Int64
	for i := 0; i < 5; i++ {
		wg.Go(func() {
			v, err := s.store.ConsumeMany(ctx(s.t), []limiter.Entry{{Key: k, Limit: l}})
			if err == nil && v.Allowed {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	if passed.Load() != 5 {
		s.t.Fatalf("%d of 5 quick uses passed, want 5", passed.Load())
	}
	v := s.consume(limiter.Entry{Key: k, Limit: l})
	s.want(v, false, "6th use")
}

// Of 50 concurrent calls at the limit exactly one passes.
func testConcurrentAtLimit(s *suite) {
	// A token bucket (and a sliding window) refills a use every
	// Window/Uses = 6 s: the filling and the 50 calls must end within it
	// for exactly one to be certain, so a slower attempt (a busy machine)
	// is repeated on a fresh key rather than judged.
	l := s.limit(10, time.Minute)
	var passed, failed atomic.Int64
	s.inSpan(l, 10*time.Second, func(attempt int) {
		k := s.key(fmt.Sprint("k", attempt))
		passed.Store(0)
		failed.Store(0)
		for i := 0; i < 9; i++ {
			s.want(s.consume(limiter.Entry{Key: k, Limit: l}), true, "filling")
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 50; i++ {
			wg.Go(func() {
				<-start
				v, err := s.store.ConsumeMany(ctx(s.t), []limiter.Entry{{Key: k, Limit: l}})
				switch {
				case err != nil:
					failed.Add(1)
				case v.Allowed:
					passed.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
	})
	if failed.Load() != 0 || passed.Load() != 1 {
		s.t.Fatalf("of 50 concurrent calls at the limit %d passed and %d failed, want exactly 1 and 0", passed.Load(), failed.Load())
	}
}

// A batch counts against all its entries at once; a refusal names the
// longest wait among the refusing entries.
func testBatchAllEntries(s *suite) {
	short, long := s.limit(2, time.Second), s.limit(1, 3*time.Second)
	a, b := s.key("a"), s.key("b")
	// A fixed window: b's window must outlast a's by more than a's window
	// (its wait is the longest), and a's two uses share one window.
	s.room(long.Window, 2500*time.Millisecond)
	s.room(short.Window, 500*time.Millisecond)
	batch := []limiter.Entry{{Key: a, Limit: short}, {Key: b, Limit: long}}
	v := s.consume(batch...)
	s.want(v, true, "first batch")
	if v.Remaining != 0 {
		s.t.Fatalf("step %d: Remaining %d, want 0 (the tightest entry)", s.step, v.Remaining)
	}
	if pa := s.peek(limiter.Entry{Key: a, Limit: short}); !pa.Allowed || pa.Remaining != 0 {
		s.t.Fatalf("step %d: a after the batch: %s, want allowed with 0 remaining after one more", s.step, show(pa))
	}
	v = s.consume(batch...)
	s.want(v, false, "second batch (b is spent)")
	if v.RetryAfter <= short.Window {
		s.t.Fatalf("step %d: RetryAfter %v, want b's wait (> %v), the longest", s.step, v.RetryAfter, short.Window)
	}
	// Spend a too: both refuse, and the wait is still the longer one.
	s.want(s.consume(limiter.Entry{Key: a, Limit: short}), true, "a alone")
	v2 := s.consume(batch...)
	s.want(v2, false, "third batch")
	if v2.RetryAfter <= short.Window {
		s.t.Fatalf("step %d: RetryAfter %v, want the longest wait (> %v)", s.step, v2.RetryAfter, short.Window)
	}
}

// A refused batch records nothing.
func testBatchRefusedRecordsNothing(s *suite) {
	free, spent := s.limit(3, 10*time.Second), s.limit(1, 10*time.Second)
	a, b := s.key("a"), s.key("b")
	s.room(spent.Window, 3*time.Second)
	s.want(s.consume(limiter.Entry{Key: b, Limit: spent}), true, "spend b")
	for i := 0; i < 3; i++ {
		s.want(s.consume(limiter.Entry{Key: a, Limit: free}, limiter.Entry{Key: b, Limit: spent}), false, "batch with spent b")
	}
	v := s.peek(limiter.Entry{Key: a, Limit: free, Cost: 3})
	if !v.Allowed || v.Remaining != 0 {
		s.t.Fatalf("step %d: a after refused batches: %s, want all 3 uses still free", s.step, show(v))
	}
}

// Of concurrent batches at the limit exactly one passes, and the losers'
// other entries are not counted.
func testConcurrentBatches(s *suite) {
	shared, own := s.limit(1, 20*time.Second), s.limit(1, 20*time.Second)
	s.room(shared.Window, 5*time.Second)
	var wg sync.WaitGroup
	var passed, failed atomic.Int64
	var winner atomic.Int64
	start := make(chan struct{})
	const n = 20
	for i := 0; i < n; i++ {
		wg.Go(func() {
			<-start
			v, err := s.store.ConsumeMany(ctx(s.t), []limiter.Entry{
				{Key: s.key(fmt.Sprintf("own-%d", i)), Limit: own},
				{Key: s.key("shared"), Limit: shared},
			})
			switch {
			case err != nil:
				failed.Add(1)
			case v.Allowed:
				passed.Add(1)
				winner.Store(int64(i))
			}
		})
	}
	close(start)
	wg.Wait()
	if failed.Load() != 0 || passed.Load() != 1 {
		s.t.Fatalf("of %d concurrent batches at the limit %d passed and %d failed, want exactly 1 and 0", n, passed.Load(), failed.Load())
	}
	for i := 0; i < n; i++ {
		v := s.peek(limiter.Entry{Key: s.key(fmt.Sprintf("own-%d", i)), Limit: own})
		if want := int64(i) != winner.Load(); v.Allowed != want {
			s.t.Fatalf("step %d: own-%d after the race: Allowed %v, want %v (a refused batch records nothing)", s.step, i, v.Allowed, want)
		}
	}
}

// A peek records nothing and answers what consume would.
func testPeek(s *suite) {
	k, l := s.key("k"), s.limit(3, 10*time.Second)
	s.room(l.Window, 3*time.Second)
	e := limiter.Entry{Key: k, Limit: l}
	for i := 0; i < 4; i++ {
		p1, p2 := s.peek(e), s.peek(e)
		if p1.Allowed != p2.Allowed || p1.Remaining != p2.Remaining || !p1.RetryAt.Equal(p2.RetryAt) {
			s.t.Fatalf("step %d: two peeks differ: %s and %s (a peek must record nothing)", s.step, show(p1), show(p2))
		}
		c := s.consume(e)
		if c.Allowed != p1.Allowed || c.Remaining != p1.Remaining {
			s.t.Fatalf("step %d: Consume = %s, but Peek said %s", s.step, show(c), show(p1))
		}
		if !c.Allowed && !c.RetryAt.Equal(p1.RetryAt) {
			s.t.Fatalf("step %d: refused Consume RetryAt %d, Peek said %d", s.step, c.RetryAt.UnixMilli(), p1.RetryAt.UnixMilli())
		}
		if c.Allowed != (i < 3) {
			s.t.Fatalf("step %d: use %d Allowed %v, want %v", s.step, i+1, c.Allowed, i < 3)
		}
	}
}

// Release gives back exactly its own call, once.
func testRelease(s *suite) {
	k, l := s.key("k"), s.limit(2, 20*time.Second)
	s.room(l.Window, 5*time.Second)
	e := limiter.Entry{Key: k, Limit: l}
	first := s.consume(e)
	s.want(first, true, "first use")
	if s.opts.NoRelease {
		if first.Release != nil {
			s.t.Fatalf("step %d: Release set although the store says it cannot release", s.step)
		}
		return
	}
	if first.Release == nil {
		s.t.Fatalf("step %d: allowed verdict under WithRelease has no Release", s.step)
	}
	if v, err := s.store.ConsumeMany(ctx(s.t), []limiter.Entry{e}); err != nil || !v.Allowed || v.Release != nil {
		s.t.Fatalf("step %d: second use without WithRelease: %s, %v (want allowed, Release nil)", s.step, show(v), err)
	}
	s.want(s.consume(e), false, "third use")
	if err := first.Release(ctx(s.t)); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	if err := first.Release(ctx(s.t)); err != nil {
		s.t.Fatalf("second Release: %v", err)
	}
	s.want(s.consume(e), true, "use after the release")
	s.want(s.consume(e), false, "a second Release of one call gives back nothing more")
}

// Cost takes that many uses; a cost above the limit is an input error.
func testCost(s *suite) {
	k, l := s.key("k"), s.limit(5, 10*time.Second)
	s.room(l.Window, 3*time.Second)
	v := s.consume(limiter.Entry{Key: k, Limit: l, Cost: 3})
	s.want(v, true, "cost 3 of 5")
	if v.Remaining != 2 {
		s.t.Fatalf("step %d: Remaining %d, want 2", s.step, v.Remaining)
	}
	s.want(s.consume(limiter.Entry{Key: k, Limit: l, Cost: 3}), false, "cost 3 with 2 left")
	v = s.consume(limiter.Entry{Key: k, Limit: l, Cost: 2})
	s.want(v, true, "cost 2 with 2 left")
	if v.Remaining != 0 {
		s.t.Fatalf("step %d: Remaining %d, want 0", s.step, v.Remaining)
	}
}

// Every key expires: once its uses have left the window, its state goes.
func testExpiry(s *suite) {
	sz, ok := s.store.(Sizer)
	l := s.limit(2, 50*time.Millisecond)
	var before int
	if ok {
		sz.Sweep()
		before = sz.Len()
	}
	for i := 0; i < 10; i++ {
		s.want(s.consume(limiter.Entry{Key: s.key(fmt.Sprint(i)), Limit: l}), true, "fresh key")
	}
	if ok && sz.Len() < before+10 {
		s.t.Fatalf("Len %d after 10 new keys, want at least %d", sz.Len(), before+10)
	}
	// Two windows cover every algorithm (a sliding window's previous
	// counter still weighs during the second).
	time.Sleep(2*l.Window + s.opts.Slack)
	for i := 0; i < 10; i++ {
		v := s.peek(limiter.Entry{Key: s.key(fmt.Sprint(i)), Limit: l, Cost: 2})
		if !v.Allowed {
			s.t.Fatalf("step %d: key %d not whole again after its window: %s", s.step, i, show(v))
		}
	}
	if ok {
		sz.Sweep()
		if n := sz.Len(); n > before {
			s.t.Fatalf("Len %d after the keys expired and Sweep, want <= %d", n, before)
		}
	}
}

// Windows from 1 ms to the largest are accepted; others are refused.
func testWindowBounds(t *testing.T, store limiter.Store, run string, opts Options) {
	for _, alg := range opts.Algorithms {
		for _, w := range []time.Duration{time.Millisecond, limiter.MaxWindow} {
			l := limiter.Limit{Algorithm: alg, Uses: 1, Window: w}
			k := run + "/bounds/" + alg.String() + "/" + w.String()
			v, err := store.ConsumeMany(ctx(t), []limiter.Entry{{Key: k, Limit: l}})
			if err != nil || !v.Allowed {
				t.Fatalf("%v window %v: first use %s, %v; want allowed", alg, w, show(v), err)
			}
			if w == limiter.MaxWindow {
				v, err = store.ConsumeMany(ctx(t), []limiter.Entry{{Key: k, Limit: l}})
				if err != nil || v.Allowed || v.RetryAfter < 100*365*24*time.Hour {
					t.Fatalf("%v window %v: second use %s, %v; want refused for about 292 years", alg, w, show(v), err)
				}
			}
		}
	}
}

// Bad input gets a typed error that names the field.
func testBadInput(t *testing.T, store limiter.Store, run string) {
	ok := limiter.Limit{Uses: 1, Window: time.Second}
	many := make([]limiter.Entry, 10_000)
	for i := range many {
		many[i] = limiter.Entry{Key: fmt.Sprint(run, i), Limit: ok}
	}
	bad := []struct {
		name    string
		entries []limiter.Entry
		field   string
		bound   bool
	}{
		{"no entries", nil, "entries", false},
		{"empty key", []limiter.Entry{{Key: "", Limit: ok}}, "entries[0].key", false},
		{"uses 0", []limiter.Entry{{Key: run, Limit: limiter.Limit{Uses: 0, Window: time.Second}}}, "entries[0].limit.uses", false},
		{"uses -1", []limiter.Entry{{Key: run, Limit: limiter.Limit{Uses: -1, Window: time.Second}}}, "entries[0].limit.uses", false},
		{"window 0", []limiter.Entry{{Key: run, Limit: limiter.Limit{Uses: 1}}}, "entries[0].limit.window", false},
		{"window 1.5ms", []limiter.Entry{{Key: run, Limit: limiter.Limit{Uses: 1, Window: 1500 * time.Microsecond}}}, "entries[0].limit.window", false},
		{"window negative", []limiter.Entry{{Key: run, Limit: limiter.Limit{Uses: 1, Window: -time.Second}}}, "entries[0].limit.window", false},
		{"window too long", []limiter.Entry{{Key: run, Limit: limiter.Limit{Uses: 1, Window: limiter.MaxWindow + 775*time.Microsecond}}}, "entries[0].limit.window", false},
		{"unknown algorithm", []limiter.Entry{{Key: run, Limit: limiter.Limit{Algorithm: 9, Uses: 1, Window: time.Second}}}, "entries[0].limit.algorithm", false},
		{"negative cost", []limiter.Entry{{Key: run, Limit: ok, Cost: -1}}, "entries[0].cost", false},
		{"cost above uses", []limiter.Entry{{Key: run, Limit: ok}, {Key: run + "x", Limit: ok, Cost: 2}}, "entries[1].cost", false},
		{"key too long", []limiter.Entry{{Key: strings.Repeat("k", 1025), Limit: ok}}, "entries[0].key", true},
		{"negative burst", []limiter.Entry{{Key: run, Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1, Window: time.Second, Burst: -1}}}, "entries[0].limit.burst", false},
		{"burst on a sliding log", []limiter.Entry{{Key: run, Limit: limiter.Limit{Uses: 1, Window: time.Second, Burst: 2}}}, "entries[0].limit.burst", false},
		{"burst on a fixed window", []limiter.Entry{{Key: run, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: time.Second, Burst: 2}}}, "entries[0].limit.burst", false},
		{"cost above the burst", []limiter.Entry{{Key: run, Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 5, Window: time.Second, Burst: 2}, Cost: 3}}, "entries[0].cost", false},
		{"debit with a negative cost", []limiter.Entry{{Key: run, Limit: ok, Cost: -1, Debit: true}}, "entries[0].cost", false},
		{"debit above the bound", []limiter.Entry{{Key: run, Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1, Window: time.Second}, Cost: limiter.DefaultMaxDebit + 1, Debit: true}}, "entries[0].cost", true},
		{"a debit and a consume in one batch", []limiter.Entry{{Key: run, Limit: ok, Debit: true}, {Key: run + "x", Limit: ok}}, "entries[1].debit", false},
		{"burst on a concurrency limit", []limiter.Entry{{Key: run, Limit: limiter.Limit{Algorithm: limiter.Concurrency, Uses: 1, Window: time.Second, Burst: 2}}}, "entries[0].limit.burst", false},
		{"debit on a concurrency limit", []limiter.Entry{{Key: run, Limit: limiter.ConcurrencyLimit(2, time.Second), Debit: true}}, "entries[0].debit", false},
		{"more slots than the bound", []limiter.Entry{{Key: run, Limit: limiter.ConcurrencyLimit(limiter.DefaultMaxLogUses+1, time.Second)}}, "entries[0].limit.uses", true},
		{"too many entries", many, "entries", true},
	}
	for _, c := range bad {
		for _, call := range []struct {
			name string
			fn   func(context.Context, []limiter.Entry) (limiter.Verdict, error)
		}{{"ConsumeMany", store.ConsumeMany}, {"PeekMany", store.PeekMany}} {
			_, err := call.fn(ctx(t), c.entries)
			var ie *limiter.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("%s with %s: error %v, want a *limiter.InputError", call.name, c.name, err)
			}
			if ie.Field != c.field {
				t.Fatalf("%s with %s: field %q, want %q (%v)", call.name, c.name, ie.Field, c.field, err)
			}
			if !errors.Is(err, limiter.ErrInvalid) || errors.Is(err, limiter.ErrBound) != c.bound {
				t.Fatalf("%s with %s: errors.Is(ErrInvalid)=%v, Is(ErrBound)=%v, want true, %v", call.name, c.name,
					errors.Is(err, limiter.ErrInvalid), errors.Is(err, limiter.ErrBound), c.bound)
			}
		}
	}
	// Nothing of the refused input was recorded.
	v, err := store.PeekMany(ctx(t), []limiter.Entry{{Key: run, Limit: ok}})
	if err != nil || !v.Allowed {
		t.Fatalf("after bad input, a fresh key: %s, %v; want allowed", show(v), err)
	}
}
