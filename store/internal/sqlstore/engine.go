package sqlstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Backend runs one call's transaction in a database's SQL.
type Backend interface {
	// Begin starts the call's transaction over cs (sorted, distinct).
	// When lock is true it takes each counter's lock in that order (or the
	// database's one lock) before it reads the clock; then it loads each
	// counter's state (SetRow, AddUse) and returns the clock reading in
	// Unix µs. lock is false for a peek, which writes nothing.
	Begin(ctx context.Context, cs []*Counter, lock bool) (Tx, int64, error)
	// Retryable reports whether err aborted a transaction that can simply
	// be run again (a deadlock the database broke).
	Retryable(err error) bool
}

// OneShot is a Backend that can also decide a whole call inside the
// database, in one round trip (a stored function). It fills each
// counter's Out and, when the batch was recorded, Mark and, for a token
// bucket, Moves.Inc and Moves.Moved: the stamp of its live moves record
// (zeros when it has none), read under the counter's lock; log uses are
// recorded under the ids in Insert, which the engine assigns.
type OneShot interface {
	DecideOnce(ctx context.Context, cs []*Counter, record bool, pinned *int64) (now int64, err error)
}

// Tx is a call's open transaction.
type Tx interface {
	// Save writes the counters' changes: each Dirty counter's row, the
	// Delete and Insert lists of log uses. A backend may defer the writes
	// to Commit.
	Save(ctx context.Context, cs []*Counter) error
	Commit(ctx context.Context) error
	// Rollback ends the transaction without writing; it is called after
	// an error and after a peek, and must not fail the call.
	Rollback()
}

// Engine decides batches over a Backend. It implements ConsumeMany and
// PeekMany of limiter.Store for the SQL stores.
type Engine struct {
	backend Backend
	bounds  limiter.Bounds
	idBase  uint64
	seq     atomic.Uint64
	closed  atomic.Bool

	// oneShot, when set, decides calls in the database.
	oneShot OneShot

	// pin, when set, replaces the database clock (tests of the
	// arithmetic against limiter's vectors).
	pin atomic.Pointer[func() int64]

	stop    chan struct{}
	stopped sync.WaitGroup
	once    sync.Once
}

// NewEngine returns an engine; bounds' zero fields mean their defaults.
func NewEngine(b Backend, bounds limiter.Bounds) *Engine {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return &Engine{backend: b, bounds: bounds.WithDefaults(), idBase: binary.LittleEndian.Uint64(r[:]), stop: make(chan struct{})}
}

// UseOneShot makes consumes and peeks run through o (releases still use
// the Backend). Call it before the engine is used.
func (e *Engine) UseOneShot(o OneShot) { e.oneShot = o }

// PinClock makes every later call read now() instead of the database's
// clock; nil restores the database's clock. For tests.
func (e *Engine) PinClock(now func() int64) {
	if now == nil {
		e.pin.Store(nil)
		return
	}
	e.pin.Store(&now)
}

// Now returns the pinned clock's reading, or dbNow.
func (e *Engine) now(dbNow int64) int64 {
	if p := e.pin.Load(); p != nil {
		return (*p)()
	}
	return dbNow
}

// Closed reports whether Close was called.
func (e *Engine) Closed() bool { return e.closed.Load() }

// StartSweeper runs sweep every interval until Close; interval <= 0
// starts nothing. Failures are logged to log (nil: slog.Default()).
func (e *Engine) StartSweeper(interval time.Duration, sweep func(context.Context) (int64, error), log *slog.Logger) {
	if interval <= 0 {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	e.stopped.Add(1)
	go func() {
		defer e.stopped.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-e.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for {
			select {
			case <-e.stop:
				return
			case <-t.C:
				if _, err := sweep(ctx); err != nil && ctx.Err() == nil {
					log.Warn("ringlimit: sweeping expired counters failed", "err", err)
				}
			}
		}
	}()
}

// Close makes later calls fail with limiter.ErrClosed and stops the
// sweeper, waiting for a sweep under way. Idempotent.
func (e *Engine) Close() {
	e.once.Do(func() {
		e.closed.Store(true)
		close(e.stop)
	})
	e.stopped.Wait()
}

// Consume decides and records a batch (limiter.Store.ConsumeMany).
func (e *Engine) Consume(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return e.decide(ctx, entries, true, limiter.WantsRelease(ctx))
}

// Peek answers what Consume would, recording nothing.
func (e *Engine) Peek(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return e.decide(ctx, entries, false, false)
}

const maxAttempts = 5

func (e *Engine) decide(ctx context.Context, entries []limiter.Entry, record, receipts bool) (limiter.Verdict, error) {
	if e.closed.Load() {
		return limiter.Verdict{}, limiter.ErrClosed
	}
	if err := e.bounds.Check(entries); err != nil {
		return limiter.Verdict{}, err
	}
	if err := ctx.Err(); err != nil {
		return limiter.Verdict{}, err
	}
	for attempt := 1; ; attempt++ {
		cs := Counters(entries)
		v, err := e.try(ctx, cs, record, receipts)
		if err == nil || attempt == maxAttempts || !e.backend.Retryable(err) || ctx.Err() != nil {
			return v, err
		}
	}
}

func (e *Engine) try(ctx context.Context, cs []*Counter, record, receipts bool) (limiter.Verdict, error) {
	if e.oneShot != nil {
		return e.tryOnce(ctx, cs, record, receipts)
	}
	tx, dbNow, err := e.backend.Begin(ctx, cs, record)
	if err != nil {
		return limiter.Verdict{}, err
	}
	now := e.now(dbNow)
	allowed := Decide(cs, now)
	if !record {
		tx.Rollback()
		return Verdict(cs, now, allowed, nil), nil
	}
	var rs []limiter.Receipt
	if debit := cs[0].Debit; allowed || debit {
		// A debit records whatever the verdict, and has no Release.
		rs = e.Record(cs, now, receipts && !debit)
	}
	if err := tx.Save(ctx, cs); err != nil {
		tx.Rollback()
		return limiter.Verdict{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		tx.Rollback()
		return limiter.Verdict{}, err
	}
	return Verdict(cs, now, allowed, e.releaser(rs)), nil
}

func (e *Engine) tryOnce(ctx context.Context, cs []*Counter, record, receipts bool) (limiter.Verdict, error) {
	var pinned *int64
	if p := e.pin.Load(); p != nil {
		now := (*p)()
		pinned = &now
	}
	for _, c := range cs {
		if LogKept(c.Alg) && record {
			c.Insert = append(c.Insert[:0], limiter.LogUse{ID: splitmix(e.idBase + e.seq.Add(1)), Cost: c.Cost})
		}
	}
	now, err := e.oneShot.DecideOnce(ctx, cs, record, pinned)
	if err != nil {
		return limiter.Verdict{}, err
	}
	allowed := true
	for _, c := range cs {
		allowed = allowed && c.Out.Allowed
	}
	var rs []limiter.Receipt
	if allowed && record && receipts && !cs[0].Debit {
		rs = make([]limiter.Receipt, 0, len(cs))
		for _, c := range cs {
			r := limiter.Receipt{Key: c.Key, Limit: c.Limit, Cost: c.Cost, At: now}
			switch c.Alg {
			case limiter.SlidingLog, limiter.Concurrency:
				r.ID = c.Insert[0].ID
			case limiter.SlidingWindow:
				r.Start = c.Mark
			default: // token bucket: its arrival time; fixed window: its window's end
				r.After = c.Mark
				if c.Alg == limiter.TokenBucket {
					// the stamp the function read, under the lock
					r.MoveInc, r.Moved = c.Moves.Inc, c.Moves.Moved
				}
			}
			rs = append(rs, r)
		}
	}
	return Verdict(cs, now, allowed, e.releaser(rs)), nil
}

// Decide answers each counter at now (trimming logs, whose dropped uses it
// lists in Delete) and reports whether the whole batch passes.
func Decide(cs []*Counter, now int64) bool {
	allowed := true
	for _, c := range cs {
		if c.Debit {
			c.Out = decideDebit(c, now)
			allowed = allowed && c.Out.Allowed
			continue
		}
		if c.Cost > c.Limit.Capacity() {
			c.Out = limiter.Outcome{Wait: math.MaxInt64, Remaining: c.Limit.Capacity()}
			allowed = false
			continue
		}
		switch c.Alg {
		case limiter.SlidingLog, limiter.Concurrency:
			c.sortLog()
			before := c.Log.Uses
			c.Out = c.Log.Decide(now, c.Limit, c.Cost)
			for _, u := range before[:len(before)-len(c.Log.Uses)] {
				c.Delete = append(c.Delete, u.ID)
			}
		case limiter.SlidingWindow:
			c.Out = c.Win.Decide(now, c.Limit, c.Cost)
		case limiter.FixedWindow:
			c.Out = c.Fixed.Decide(now, c.Limit, c.Cost) // advances c.Fixed
		default:
			c.Out = c.Bucket.Decide(now, c.Limit, c.Cost)
		}
		allowed = allowed && c.Out.Allowed
	}
	return allowed
}

// decideDebit answers a debit on one counter (limiter's DecideDebit),
// trimming a log as Decide does.
func decideDebit(c *Counter, now int64) limiter.Outcome {
	switch c.Alg {
	case limiter.SlidingLog, limiter.Concurrency:
		c.sortLog()
		before := c.Log.Uses
		o := c.Log.DecideDebit(now, c.Limit, c.Cost)
		for _, u := range before[:len(before)-len(c.Log.Uses)] {
			c.Delete = append(c.Delete, u.ID)
		}
		return o
	case limiter.SlidingWindow:
		return c.Win.DecideDebit(now, c.Limit, c.Cost)
	case limiter.FixedWindow:
		return c.Fixed.DecideDebit(now, c.Limit, c.Cost)
	}
	return c.Bucket.DecideDebit(now, c.Limit, c.Cost)
}

// Record takes each counter's cost at now (after Decide allowed the
// batch), marks the rows to write, and returns receipts when asked.
func (e *Engine) Record(cs []*Counter, now int64, receipts bool) []limiter.Receipt {
	var rs []limiter.Receipt
	if receipts {
		rs = make([]limiter.Receipt, 0, len(cs))
	}
	for _, c := range cs {
		r := limiter.Receipt{Key: c.Key, Limit: c.Limit, Cost: c.Cost, At: now}
		switch c.Alg {
		case limiter.SlidingLog, limiter.Concurrency:
			r.ID = splitmix(e.idBase + e.seq.Add(1))
			c.Log.Record(now, c.Cost, r.ID)
			c.Insert = append(c.Insert, limiter.LogUse{At: now, Cost: c.Cost, ID: r.ID})
		case limiter.SlidingWindow:
			c.Win.Advance(now, c.Window)
			c.Win.Record(c.Cost)
			r.Start = c.Win.Start
		case limiter.FixedWindow:
			c.Fixed.Advance(now, c.Limit)
			c.Fixed.Record(c.Cost)
			r.After = c.Fixed.End
		default:
			c.Bucket.Record(now, c.Limit, c.Cost)
			r.After = c.Bucket.TAT
			if c.Bucket.Rem > 0 {
				r.After++
			}
			r.MoveInc, r.Moved = c.Moves.Stamp(now)
		}
		c.Dirty = true
		if receipts {
			rs = append(rs, r)
		}
	}
	return rs
}

// Verdict builds the batch's verdict as limiter.Memory does: RetryAt in
// whole milliseconds rounded up, on the database's clock.
func Verdict(cs []*Counter, now int64, allowed bool, release func(context.Context) error) limiter.Verdict {
	v := limiter.Verdict{Allowed: allowed, Remaining: math.MaxInt64}
	var wait, reset int64
	for _, c := range cs {
		v.Remaining = min(v.Remaining, c.Out.Remaining)
		if !c.Out.Allowed {
			wait = max(wait, c.Out.Wait)
		}
		reset = max(reset, c.Out.Reset)
	}
	if allowed {
		v.ResetAt = time.UnixMicro(reset)
		v.Release = release
		return v
	}
	at := ceilMilli(satAdd(now, wait))
	v.RetryAt = time.UnixMicro(at)
	v.RetryAfter = limiter.MicrosDuration(at - now)
	return v
}

func (e *Engine) releaser(rs []limiter.Receipt) func(context.Context) error {
	if rs == nil {
		return nil
	}
	var done atomic.Bool
	return func(ctx context.Context) error {
		if done.Swap(true) {
			return nil
		}
		return e.Release(ctx, rs)
	}
}

// Release gives back the uses the receipts recorded, as far as they are
// still counted: a sliding log deletes exactly its use's row; a window or
// bucket gives back like limiter.Memory.ReleaseReceipts. It works after
// Close too (a late verdict's give-back), as long as the database does.
func (e *Engine) Release(ctx context.Context, rs []limiter.Receipt) error {
	if len(rs) == 0 {
		return nil
	}
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if err = e.release(ctx, rs); err == nil || !e.backend.Retryable(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("ringlimit: release: %w", err)
	}
	return nil
}

func (e *Engine) release(ctx context.Context, rs []limiter.Receipt) error {
	entries := make([]limiter.Entry, len(rs))
	for i, r := range rs {
		entries[i] = limiter.Entry{Key: r.Key, Limit: r.Limit}
	}
	cs := Counters(entries)
	tx, dbNow, err := e.backend.Begin(ctx, cs, true)
	if err != nil {
		return err
	}
	now := e.now(dbNow)
	find := func(r *limiter.Receipt) *Counter {
		for _, c := range cs {
			if c.Key == r.Key && c.Alg == r.Limit.Algorithm && c.Window == limiter.Micros(r.Limit.Window) {
				return c
			}
		}
		return nil
	}
	for i := range rs {
		r := &rs[i]
		c := find(r)
		switch r.Limit.Algorithm {
		case limiter.SlidingLog, limiter.Concurrency:
			if c.Log.Remove(r.ID) {
				c.Delete = append(c.Delete, r.ID)
			}
		case limiter.SlidingWindow:
			if c.Win.Remove(now, c.Window, r.Start, r.Cost) {
				c.Dirty = true
			}
		case limiter.FixedWindow:
			if c.Fixed.Remove(now, r.Limit, r.After, r.Cost) {
				c.Dirty = true
			}
		default:
			// Release subtracts how far the call moved since its receipt
			// was stamped (limiter.BucketMoves), and records what it gives
			// back in the record, which is written with the bucket.
			if c.Bucket.Release(now, r.Limit, r.Cost, r.After, r.MoveInc, r.Moved, &c.Moves, e.newInc()) {
				c.Dirty = true
				c.MovesDirty = c.Moves.Live(now)
			}
		}
	}
	if err := tx.Save(ctx, cs); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		tx.Rollback()
		return err
	}
	return nil
}

// newInc returns an incarnation for a moves record that begins: random
// across engines (the id base), unique within one, never 0.
func (e *Engine) newInc() uint64 {
	x := splitmix(e.idBase ^ 0x6d6f766573 + e.seq.Add(1))
	if x == 0 {
		x = 1
	}
	return x
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
