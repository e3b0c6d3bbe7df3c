// Package sqlstore is the logic the PostgreSQL, MySQL and SQLite stores
// share: turning a batch into distinct counters in a fixed order, turning
// rows into limiter states and back, deciding with limiter's pure
// functions, building verdicts and receipts, and the sweeper. Each store
// supplies a Backend that runs the transaction in its own SQL.
//
// Schema (the same shape in every database; names are the configured
// table T):
//
//	T      one row per counter: ckey, alg, win_us (primary key), a, b, c
//	       (the state: sliding window Start/Curr/Prev, token bucket
//	       TAT/Rem/Uses, fixed window End/Count/0, zero for a sliding
//	       log) and exp_us, when the
//	       state is empty again (Unix µs on the database's clock).
//	T_log  one row per sliding-log use: ckey, win_us, id (primary key),
//	       at_us, cost, exp_us = at_us + window; and one per slot a
//	       concurrency limit holds, its win_us negated (LogWin) so it
//	       stays apart from a sliding log of the same key and window,
//	       exp_us = at_us + TTL.
//
// A sliding log's row in T carries no state: it is the row that serialises
// the key (MySQL locks it) and what Len counts.
//
// A token bucket's moves record (limiter.BucketMoves) is a row of T of its
// own, under alg MovesAlg and the bucket's ckey and win_us: a, b, c are
// the record's incarnation (its 64 bits as a signed bigint), moved µs and
// Until, and exp_us is Until, so the sweeper drops it once no receipt can
// need it. It exists only for buckets whose arrival time a release
// lowered; it is read and written under the bucket's lock, with the
// bucket's row. Rows written before it existed simply have no record,
// which is what a bucket with no give-back since its last expiry has.
package sqlstore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/limiter"
)

// Counter is one distinct counter of a batch: a key under one algorithm
// and window, its state as loaded, the outcome, and the writes the
// backend must make.
type Counter struct {
	Key    string
	Alg    limiter.Algorithm
	Window int64 // µs
	// Limit is the tightest limit the batch named for this counter.
	Limit limiter.Limit
	// Cost is the sum of the batch's costs for this counter.
	Cost int64
	// Debit says the batch is a debit (limiter.Entry.Debit): Cost is
	// recorded whatever the outcome.
	Debit bool

	// State, filled by the backend's load (zero when there is no row).
	Log    limiter.LogState
	Win    limiter.WindowState
	Bucket limiter.BucketState
	Fixed  limiter.FixedState
	// Moves is a token bucket's moves record, from its own row (see the
	// package doc; zero when there is none).
	Moves limiter.BucketMoves

	// Out is the counter's answer.
	Out limiter.Outcome

	// Dirty says the counter's row must be written (upserted from Row).
	Dirty bool
	// MovesDirty says a token bucket's moves record must be written
	// (upserted from MovesRow, as the row of alg MovesAlg).
	MovesDirty bool
	// Delete lists log-use ids to delete (trimmed or released).
	Delete []uint64
	// Insert lists log uses to insert.
	Insert []limiter.LogUse

	// Mark is what a OneShot backend reports for the receipt: the window
	// start a sliding window's use was counted in, the arrival time a
	// token bucket's use left behind, rounded up, or the end of the window
	// a fixed window's use was counted in.
	Mark int64
}

// LockID is the counter's 64-bit lock name (PostgreSQL advisory locks).
// Two counters may share one; that only serialises them.
func (c *Counter) LockID() int64 {
	var b [9]byte
	b[0] = byte(c.Alg)
	binary.LittleEndian.PutUint64(b[1:], uint64(c.Window))
	d := xxhash.New()
	_, _ = d.WriteString(c.Key)
	_, _ = d.Write(b[:])
	return int64(d.Sum64())
}

// Row returns the counter's state as the columns a, b, c and exp_us.
func (c *Counter) Row() (a, b, cc, exp int64) {
	switch c.Alg {
	case limiter.SlidingLog, limiter.Concurrency:
		exp = 0
		if n := len(c.Log.Uses); n > 0 {
			exp = satAdd(c.Log.Uses[n-1].At, c.Window)
		}
		return 0, 0, 0, exp
	case limiter.SlidingWindow:
		s := c.Win
		switch {
		case s.Curr > 0:
			exp = satAdd(s.Start, satAdd(c.Window, c.Window))
		case s.Prev > 0:
			exp = satAdd(s.Start, c.Window)
		}
		return s.Start, s.Curr, s.Prev, exp
	case limiter.FixedWindow:
		s := c.Fixed
		if s.Count > 0 {
			exp = s.End
		}
		return s.End, s.Count, 0, exp
	default:
		s := c.Bucket
		exp = s.TAT
		if s.Rem > 0 {
			exp = satAdd(exp, 1)
		}
		return s.TAT, s.Rem, s.Uses, exp
	}
}

// MovesAlg is the alg of a token bucket's moves record row (see the
// package doc): no algorithm's number.
const MovesAlg = 100

// MovesRow returns a token bucket's moves record as the columns a, b, c
// and exp_us of its row.
func (c *Counter) MovesRow() (a, b, cc, exp int64) {
	m := c.Moves
	return int64(m.Inc), m.Moved, m.Until, m.Until
}

// SetMovesRow loads a token bucket's moves record from its row's columns.
func (c *Counter) SetMovesRow(a, b, cc int64) {
	if c.Alg == limiter.TokenBucket {
		c.Moves = limiter.BucketMoves{Inc: uint64(a), Moved: b, Until: cc}
	}
}

// SetLoaded loads one row of T that a load read for (key, alg, win): the
// counter's own row, or a token bucket's moves record row (alg
// MovesAlg). find returns the counter of the row's key and window under
// an algorithm (nil: none); rows of no counter are ignored.
func SetLoaded(find func(alg limiter.Algorithm) *Counter, alg, a, b, cc int64) {
	if alg == MovesAlg {
		if ct := find(limiter.TokenBucket); ct != nil {
			ct.SetMovesRow(a, b, cc)
		}
		return
	}
	if ct := find(limiter.Algorithm(alg)); ct != nil {
		ct.SetRow(a, b, cc)
	}
}

// SetRow loads the counter's state from the columns a, b, c.
func (c *Counter) SetRow(a, b, cc int64) {
	switch c.Alg {
	case limiter.SlidingWindow:
		c.Win = limiter.WindowState{Start: a, Curr: b, Prev: cc}
	case limiter.TokenBucket:
		c.Bucket = limiter.BucketState{TAT: a, Rem: b, Uses: cc}
	case limiter.FixedWindow:
		c.Fixed = limiter.FixedState{End: a, Count: b}
	}
}

// AddUse loads one sliding-log row. Rows may come in any order; the
// engine sorts them.
func (c *Counter) AddUse(id int64, at, cost int64) {
	c.Log.Uses = append(c.Log.Uses, limiter.LogUse{At: at, Cost: cost, ID: uint64(id)})
	c.Log.Total += cost
}

// LogExp is when a log use recorded at at leaves the window.
func (c *Counter) LogExp(at int64) int64 { return satAdd(at, c.Window) }

func (c *Counter) sortLog() {
	slices.SortFunc(c.Log.Uses, func(a, b limiter.LogUse) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.ID, b.ID))
	})
}

// compare orders counters by key bytes, algorithm and window: the order
// in which backends lock them (the primary key's order).
func compare(a, b *Counter) int {
	return cmp.Or(bytes.Compare([]byte(a.Key), []byte(b.Key)), cmp.Compare(a.Alg, b.Alg), cmp.Compare(a.Window, b.Window))
}

// Counters turns a checked batch into its distinct counters, sorted. The
// same counter twice takes both costs under the tighter limit, as in
// limiter.Memory.
func Counters(entries []limiter.Entry) []*Counter {
	cs := make([]*Counter, 0, len(entries))
	for i := range entries {
		e := &entries[i]
		w, cost := limiter.Micros(e.Limit.Window), e.Cost
		if cost == 0 {
			cost = 1
		}
		dup := false
		for _, c := range cs {
			if c.Key == e.Key && c.Alg == e.Limit.Algorithm && c.Window == w {
				c.Cost += cost
				c.Limit = limiter.Tighter(c.Limit, e.Limit)
				dup = true
				break
			}
		}
		if !dup {
			cs = append(cs, &Counter{Key: e.Key, Alg: e.Limit.Algorithm, Window: w, Limit: e.Limit, Cost: cost, Debit: e.Debit})
		}
	}
	slices.SortFunc(cs, compare)
	return cs
}

// LockIDs returns the counters' lock ids, sorted and without repeats: the
// order in which two batches take them can never form a cycle.
func LockIDs(cs []*Counter) []int64 {
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.LockID()
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// ceilMilli rounds a µs instant up to whole milliseconds (as limiter does).
func ceilMilli(us int64) int64 {
	if us > math.MaxInt64-1000 {
		return us
	}
	ms := us / 1000
	if us%1000 > 0 {
		ms++
	}
	return ms * 1000
}

// LogKept reports an algorithm whose state is log rows: a sliding log,
// and a concurrency limit, whose slots are a log's uses (each leaves at
// its TTL, or when released by its id).
func LogKept(a limiter.Algorithm) bool {
	return a == limiter.SlidingLog || a == limiter.Concurrency
}

// LogWin is the win_us the counter's log rows are stored under: its
// window, and for a concurrency limit the window negated, so that its
// slots and a sliding log of the same key and window (the log table has
// no alg column) stay apart. No window is negative.
func (c *Counter) LogWin() int64 {
	if c.Alg == limiter.Concurrency {
		return -c.Window
	}
	return c.Window
}

// LogRowCounter names the counter a log row of win_us win belongs to:
// LogWin's inverse.
func LogRowCounter(win int64) (limiter.Algorithm, int64) {
	if win < 0 {
		return limiter.Concurrency, -win
	}
	return limiter.SlidingLog, win
}
