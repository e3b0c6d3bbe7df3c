package limiter

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// KeyBudget bounds the counters held by one or more Memory stores
// together: a cluster node's engine (the keys it owns) and its replica
// holder share one, so that replicas count toward the node's --max-keys.
//
// Only live counters count. A store at the bound drops the counters
// whose uses have all left their windows before it refuses a new one
// (see Memory.ConsumeMany), so an expired counter never keeps a live key
// out, even before the periodic sweep.
type KeyBudget struct {
	max int64
	n   atomic.Int64

	mu     sync.Mutex
	stores []*Memory
}

// NewKeyBudget returns a budget of max counters (at least 1).
func NewKeyBudget(max int) *KeyBudget { return &KeyBudget{max: int64(max)} }

// Max returns the bound.
func (b *KeyBudget) Max() int { return int(b.max) }

// Len returns the counters held by the stores counting in the budget
// (expired ones included until they are dropped).
func (b *KeyBudget) Len() int { return int(b.n.Load()) }

func (b *KeyBudget) join(m *Memory) {
	b.mu.Lock()
	b.stores = append(b.stores, m)
	b.mu.Unlock()
}

func (b *KeyBudget) leave(m *Memory) {
	b.mu.Lock()
	b.stores = slices.DeleteFunc(b.stores, func(x *Memory) bool { return x == m })
	b.mu.Unlock()
}

// reserve takes n places, or none when that would pass the bound.
func (b *KeyBudget) reserve(n int) bool {
	if b.n.Add(int64(n)) > b.max {
		b.n.Add(-int64(n))
		return false
	}
	return true
}

// reclaim drops the expired counters of every store in the budget. Only
// shards whose earliest expiry has come are swept, so a store full of
// live counters pays one atomic read per shard; the work is bounded by
// the counters of the shards that have something to drop.
func (b *KeyBudget) reclaim() {
	b.mu.Lock()
	stores := slices.Clone(b.stores)
	b.mu.Unlock()
	for _, m := range stores {
		m.reclaim()
	}
}

// errFull is record's signal that the budget has no room: decide
// reclaims expired counters and tries once more before it refuses.
var errFull = errors.New("limiter: key budget full")

func (b *KeyBudget) fullError() error {
	return bound("keys", "the store holds %d live keys, the bound is %d", b.n.Load(), b.max)
}

// reclaim sweeps the shards of m whose earliest expiry has come. Callers
// hold no shard lock.
func (m *Memory) reclaim() {
	now := m.clock.now()
	for i := range m.shards {
		s := &m.shards[i]
		if s.next.Load() > now {
			continue
		}
		s.mu.Lock()
		if s.next.Load() <= now {
			m.sweepShard(s, now)
		}
		s.mu.Unlock()
	}
}

// Live drops the counters that have expired (in the shards where any
// can have) and returns the counters left: the store's live keys.
func (m *Memory) Live() int {
	m.reclaim()
	return m.Len()
}

// lower records that a counter of s expires at exp. Callers hold s.mu.
func (s *shard) lower(exp int64) {
	if exp < s.next.Load() {
		s.next.Store(exp)
	}
}

// The expiry of a counter is the first instant at which the sweep would
// drop it: all its uses have left the window.

func logExpiry(st *LogState, w int64) int64 {
	if len(st.Uses) == 0 {
		return math.MinInt64
	}
	return satAdd(st.Uses[len(st.Uses)-1].At, w) // the newest use is last
}

func windowExpiry(st *WindowState, w int64) int64 {
	switch {
	case st.Curr > 0:
		return satAdd(satAdd(st.Start, w), w)
	case st.Prev > 0:
		return satAdd(st.Start, w)
	}
	return math.MinInt64
}

func fixedExpiry(st *FixedState) int64 {
	if st.Count == 0 {
		return math.MinInt64
	}
	return st.End
}

func bucketExpiry(st *BucketState) int64 {
	if st.Rem > 0 {
		return satAdd(st.TAT, 1)
	}
	return st.TAT
}

// ImportWithin is Import within the key budget: refused lists the states
// (by index) that would have added a counter past it, which m does not
// hold. A store at the bound first drops its expired counters.
func (m *Memory) ImportWithin(states []CounterState) (refused []int) {
	now := m.clock.now()
	reclaimed := false
	for i, c := range states {
		ok := m.importOne(c, now, true)
		if !ok && !reclaimed {
			m.budget.reclaim()
			reclaimed = true
			ok = m.importOne(c, now, true)
		}
		if !ok {
			refused = append(refused, i)
		}
	}
	return refused
}

// CheckState validates a counter state that came from a peer (a hand-off,
// a replica, a fetch answer) against the contract and the bounds, naming
// the bad field ("log", "log[3].cost", "window"...). A state a store
// exports always passes with the bounds of the store that exported it.
//
// A sliding log may hold at most Bounds.MaxLogUses calls: every limit has
// Uses within that bound and every call costs at least one use, so a
// longer log cannot be one that a node counted (exports keep the newest
// MaxLogUses calls, which decide every limit exactly as the whole log
// would). Times are ages: a store exports a log's calls and a window's
// start in the past and a bucket's arrival time ahead (by at most one
// window, unless a Burst or debits took it further). The check allows each one window ahead (an older node read its
// clock before the shard lock, so a call recorded in between looked a
// moment ahead), never more: such a state would stay counted longer than
// its window.
func CheckState(c *CounterState, b Bounds) error {
	b = b.WithDefaults()
	switch {
	case c.Key == "":
		return invalid("key", "must not be empty")
	case len(c.Key) > b.MaxKeyBytes:
		return bound("key", "%d bytes, longer than the bound of %d", len(c.Key), b.MaxKeyBytes)
	case !c.Algorithm.Valid():
		return invalid("algorithm", "unknown algorithm %d", c.Algorithm)
	case c.Window < time.Millisecond || c.Window > MaxWindow || c.Window%time.Millisecond != 0:
		return invalid("window", "must be a whole number of milliseconds from 1ms to %dms, got %v", MaxWindow/time.Millisecond, c.Window)
	}
	w := Micros(c.Window)
	switch c.Algorithm {
	case SlidingLog, Concurrency: // a concurrency limit's slots are a log
		if int64(len(c.Log)) > b.MaxLogUses {
			return bound("log", "%d calls, more than the sliding-log bound of %d", len(c.Log), b.MaxLogUses)
		}
		for j, u := range c.Log {
			switch {
			case u.Cost < 1 || u.Cost > b.MaxLogUses:
				return invalid("log["+strconv.Itoa(j)+"].cost", "must be from 1 to %d, got %d", b.MaxLogUses, u.Cost)
			case u.At > w:
				return invalid("log["+strconv.Itoa(j)+"].age", "a call more than one window in the future (%d µs ahead)", u.At)
			}
		}
	case SlidingWindow:
		switch {
		case c.Counts.Curr < 0 || c.Counts.Prev < 0:
			return invalid("counts", "must not be negative, got %d and %d", c.Counts.Curr, c.Counts.Prev)
		case c.Counts.Start > w:
			return invalid("counts.start", "more than one window ahead (%d µs)", c.Counts.Start)
		}
	case FixedWindow:
		switch {
		case c.Fixed.Count < 0:
			return invalid("fixed.count", "must not be negative, got %d", c.Fixed.Count)
		case c.Fixed.End > satAdd(w, w):
			// A window ends at most one (calendar) window ahead: a month of
			// 31 days is longer than its nominal 30, hence two.
			return invalid("fixed.end", "more than two windows ahead (%d µs)", c.Fixed.End)
		}
	default:
		switch {
		case c.Bucket.Uses < 0 || c.Bucket.Rem < 0 || (c.Bucket.Uses > 0 && c.Bucket.Rem >= c.Bucket.Uses):
			return invalid("bucket", "remainder %d of %d uses is out of range", c.Bucket.Rem, c.Bucket.Uses)
		case c.Bucket.TAT > satMul(w, b.MaxDebit):
			// A burst or a debit (Entry.Debit) leaves a bucket owing more
			// than a window: a debit of MaxDebit at Uses 1 owes MaxDebit
			// windows. Beyond that no state a node counted goes.
			return invalid("bucket.tat", "more than %d windows ahead (%d µs)", b.MaxDebit, c.Bucket.TAT)
		case c.Moves.Inc == 0 && (c.Moves.Moved != 0 || c.Moves.Until != 0):
			return invalid("moves.inc", "must not be 0 for a record that moved %d µs until %d µs", c.Moves.Moved, c.Moves.Until)
		case c.Moves.Moved < 0:
			return invalid("moves.moved", "must not be negative, got %d", c.Moves.Moved)
		case c.Moves.Until > satMul(w, b.MaxDebit):
			// The record goes when the arrival time before its last
			// move is past: no further ahead than an arrival time goes.
			return invalid("moves.until", "more than %d windows ahead (%d µs)", b.MaxDebit, c.Moves.Until)
		case len(c.Holds) > maxHolds:
			return bound("holds", "%d leases, more than the bound of %d", len(c.Holds), maxHolds)
		}
		for j, h := range c.Holds {
			switch {
			case h.ID == 0:
				return invalid("holds["+strconv.Itoa(j)+"].id", "must not be 0")
			case h.K < 1 || h.K > b.MaxDebit:
				return invalid("holds["+strconv.Itoa(j)+"].k", "must be from 1 to %d, got %d", b.MaxDebit, h.K)
			case h.Expiry > satAdd(w, maxHoldSlack):
				// A lease lasts at most a window; its return is expected
				// within a slack after it.
				return invalid("holds["+strconv.Itoa(j)+"].expiry", "more than a window and %v ahead (%d µs)", MicrosDuration(maxHoldSlack), h.Expiry)
			}
		}
	}
	return nil
}

// Bounds on a bucket's holds from a peer: the leases out on one counter,
// and how far past a window a hold may end (a lease lasts at most a
// window; its return slack is short).
const (
	maxHolds     = 4096
	maxHoldSlack = 60_000_000 // µs
)

// clipLog returns the newest max calls of a log (oldest first): what an
// export sends of a log longer than any limit's Uses can be (a merge of
// two nodes' counts while they disagreed), so that every receiver with
// the same bounds accepts it (CheckState).
func clipLog(us []LogUse, max int64) []LogUse {
	if int64(len(us)) > max {
		return us[int64(len(us))-max:]
	}
	return us
}

// satMul multiplies non-negative a and b without overflowing int64.
func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
