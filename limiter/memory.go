package limiter

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// MemoryConfig configures NewMemory. The zero value is ready to use.
type MemoryConfig struct {
	// Shards is the number of independently locked parts, rounded up to a
	// power of two. Default 64.
	Shards int
	// Clock reads the time. Default: the process clock with its monotonic
	// part (a wall-clock step never moves a window).
	Clock Clock
	// SweepInterval is how often a background sweeper drops expired
	// counters. Default 30 s; negative turns the sweeper off (expired
	// state is still dropped lazily when its key is next used, and by Sweep).
	SweepInterval time.Duration
	// Bounds on input and keys held; zero fields mean their defaults.
	Bounds Bounds
	// Keys, when set, counts this store's counters in a budget shared with
	// other stores (a cluster node's engine and its replicas), whose bound
	// replaces Bounds.MaxKeys. Default: a budget of the store's own of
	// Bounds.MaxKeys (none when that is 0).
	Keys *KeyBudget
	// Seed seeds the call ids (unique per call, used by Release and by
	// merges of handed-off state). Default 0: a random seed.
	Seed uint64
}

// counterKey names one counter: a key under one window. The algorithm
// picks the map, so it is not part of the key; nor are a fixed window's
// calendar and zone, which only say where a new window ends (the state
// holds its window's end), as Uses only says how many it holds.
type counterKey struct {
	key    string
	window int64 // µs
}

type shard struct {
	mu      sync.Mutex
	logs    map[counterKey]*LogState
	windows map[counterKey]*WindowState
	// buckets hold pointers: a key's slot is 32 bytes instead of 48, and
	// a call on a known key updates the state in place (no map write).
	buckets map[counterKey]*BucketState
	fixed   map[counterKey]*FixedState
	// slots are the concurrency limits' slots, a log per counter kept
	// apart from the sliding logs: the same key and window name two
	// counters.
	slots map[counterKey]*LogState
	// holds are the tokens out on leases, only for the buckets that have
	// some (nil until the first): a key's bucket state stays 24 bytes,
	// and a bucket with none costs one length check (see lease.go).
	holds map[counterKey][]BucketHold
	// moves are the token buckets' moves records (see BucketMoves), only
	// for the buckets a give-back lowered while a receipt it may affect
	// can still give anything back (nil until the first): a bucket that
	// never gives back costs nothing more than a length check. A bucket
	// is kept while its record is live (see sweepShard), so the record
	// travels with the bucket's state.
	moves map[counterKey]BucketMoves
	// resets mark the window and bucket counters Reset dropped, while a
	// receipt recorded before the reset could still give something back
	// (nil until the first): such a receipt names no call (those counters
	// count, they keep no calls), and given back to the counter that
	// started after the reset it would return uses of later calls.
	resets map[resetKey]resetMark
	seq    uint64
	// next is no later than the expiry of any counter in the shard
	// (µs; written under mu): before it, nothing here can be reclaimed,
	// so a store at its key bound skips the shard (see reclaim).
	next atomic.Int64
	_    [40]byte // 128 bytes in all: two shards never share a cache line (nor an adjacent-line prefetch pair)
}

// Memory is the in-memory Store: sharded by key hash, one monotonic clock,
// every counter expiring when its uses have left the window. It is the
// single-process store and the engine of a cluster node.
type Memory struct {
	shards  []shard
	mask    uint64
	clock   microClock
	bounds  Bounds
	budget  *KeyBudget // nil: no bound on keys
	idBase  uint64
	keys    atomic.Int64
	closed  atomic.Bool
	stop    chan struct{}
	stopped sync.WaitGroup
	once    sync.Once
}

var _ Store = (*Memory)(nil)

// NewMemory returns an in-memory store. Call Close to stop its sweeper.
func NewMemory(cfg MemoryConfig) *Memory {
	n := 64
	if cfg.Shards > 0 {
		n = 1
		for n < cfg.Shards {
			n <<= 1
		}
	}
	m := &Memory{
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		clock:  newMicroClock(cfg.Clock),
		bounds: cfg.Bounds.WithDefaults(),
		budget: cfg.Keys,
		idBase: cfg.Seed,
		stop:   make(chan struct{}),
	}
	if m.budget == nil && m.bounds.MaxKeys > 0 {
		m.budget = NewKeyBudget(m.bounds.MaxKeys)
	}
	if m.budget != nil {
		m.budget.join(m)
	}
	if m.idBase == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		m.idBase = binary.LittleEndian.Uint64(b[:])
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.logs = map[counterKey]*LogState{}
		s.windows = map[counterKey]*WindowState{}
		s.buckets = map[counterKey]*BucketState{}
		s.fixed = map[counterKey]*FixedState{}
		s.slots = map[counterKey]*LogState{}
		s.next.Store(math.MaxInt64)
	}
	interval := cfg.SweepInterval
	if interval == 0 {
		interval = 30 * time.Second
	}
	if interval > 0 {
		m.stopped.Add(1)
		go m.sweeper(interval)
	}
	return m
}

func (m *Memory) sweeper(every time.Duration) {
	defer m.stopped.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.Sweep()
		}
	}
}

// Close stops the sweeper; later calls get ErrClosed. Idempotent.
func (m *Memory) Close() error {
	m.once.Do(func() {
		m.closed.Store(true)
		close(m.stop)
		if m.budget != nil {
			m.budget.leave(m)
		}
	})
	m.stopped.Wait()
	return nil
}

// Len reports the counters held, expired ones included until a sweep (or
// a store at its key bound) drops them; Live counts only live ones.
func (m *Memory) Len() int { return int(m.keys.Load()) }

// Budget returns the key budget the store counts in (nil: no bound), for
// another store to share it (NewMemory's MemoryConfig.Keys).
func (m *Memory) Budget() *KeyBudget { return m.budget }

// Now returns the store's clock in Unix microseconds.
func (m *Memory) Now() int64 { return m.clock.now() }

// Sweep drops every counter whose uses have all left the window.
func (m *Memory) Sweep() {
	now := m.clock.now()
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		m.sweepShard(s, now)
		s.mu.Unlock()
	}
}

// sweepShard drops the shard's expired counters and sets its next to the
// earliest expiry of those left. Callers hold s.mu.
func (m *Memory) sweepShard(s *shard, now int64) {
	next := int64(math.MaxInt64)
	for _, logs := range [...]map[counterKey]*LogState{s.logs, s.slots} {
		for k, st := range logs {
			st.Trim(now, k.window)
			if len(st.Uses) == 0 {
				delete(logs, k)
				m.count(-1)
				continue
			}
			next = min(next, logExpiry(st, k.window))
		}
	}
	for k, st := range s.windows {
		if windowExpired(st, now, k.window) {
			delete(s.windows, k)
			m.count(-1)
			continue
		}
		next = min(next, windowExpiry(st, k.window))
	}
	for k, mv := range s.moves {
		if !mv.Live(now) {
			delete(s.moves, k)
		}
	}
	for k, mk := range s.resets {
		if mk.until <= now {
			delete(s.resets, k)
			continue
		}
		next = min(next, mk.until)
	}
	for k, st := range s.buckets {
		if len(s.holds) > 0 {
			if held := m.heldAt(s, k, now); held > 0 {
				next = min(next, s.holdExpiry(k))
				continue // its bucket holds at most B - held: not full
			}
		}
		if st.Empty(now) {
			if mv, ok := s.moves[k]; ok {
				// Kept while its moves record is (live: see above), so
				// the record goes wherever the bucket's state goes.
				next = min(next, mv.Until)
				continue
			}
			delete(s.buckets, k)
			m.count(-1)
			continue
		}
		next = min(next, max(bucketExpiry(st), s.movesUntil(k)))
	}
	for k, st := range s.fixed {
		if st.Empty(now) {
			delete(s.fixed, k)
			m.count(-1)
			continue
		}
		next = min(next, fixedExpiry(st))
	}
	s.next.Store(next)
}

func windowExpired(st *WindowState, now, w int64) bool {
	st.Advance(now, w)
	return st.Curr == 0 && st.Prev == 0
}

func (m *Memory) shardOf(key string) uint32 {
	return uint32(xxhash.Sum64String(key) & m.mask)
}

// ConsumeMany checks and records a batch atomically.
func (m *Memory) ConsumeMany(ctx context.Context, entries []Entry) (v Verdict, err error) {
	// decide writes into v: a Verdict is large, and copying it up through
	// the calls was a tenth of a hot-key consume.
	want := wantNothing
	if WantsRelease(ctx) {
		want = wantRelease
	}
	_, err = m.decide(ctx, entries, true, want, &v)
	return v, err
}

// PeekMany answers what ConsumeMany would, recording nothing.
func (m *Memory) PeekMany(ctx context.Context, entries []Entry) (v Verdict, err error) {
	_, err = m.decide(ctx, entries, false, wantNothing, &v)
	return v, err
}

// ConsumeReceipts is ConsumeMany for engines that route calls (a cluster
// node): it also returns the receipts of the recorded uses, one per
// distinct counter, which ReleaseReceipts gives back; the verdict has no
// Release of its own (the caller holds the receipts). record=false peeks.
func (m *Memory) ConsumeReceipts(ctx context.Context, entries []Entry, record bool) (v Verdict, rs []Receipt, err error) {
	want := wantNothing
	if record {
		want = wantReceipts
	}
	rs, err = m.decide(ctx, entries, record, want, &v)
	return v, rs, err
}

// item is one distinct counter of a batch.
type item struct {
	ck    counterKey
	alg   Algorithm
	limit Limit
	cost  int64
	shard uint32
	out   Outcome
	// found and the state peek read (sliding window, token bucket), so
	// record writes it back without a second lookup. A batch holds each
	// counter once, so nothing else changes it in between.
	found  bool
	log    *LogState
	window WindowState
	bucket BucketState
	bptr   *BucketState // the stored bucket, when found
	held   int64        // a bucket's tokens out on leases (see receiptAfter)
	wptr   *WindowState // the stored window, when found
	fixed  FixedState
	fptr   *FixedState // the stored fixed window, when found
}

// want is what decide hands back of the uses it records.
type want uint8

const (
	wantNothing  want = iota
	wantRelease       // the verdict's Release (ConsumeMany WithRelease)
	wantReceipts      // the receipts themselves (ConsumeReceipts)
)

// decide answers a batch into *v (left zero on an error), recording it
// when record is set and allowed.
func (m *Memory) decide(ctx context.Context, entries []Entry, record bool, want want, v *Verdict) ([]Receipt, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if err := m.bounds.Check(entries); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Items live on the stack; most calls carry one entry, and zeroing
	// eight items for them would cost more than the rest of the call.
	var items []item
	if len(entries) == 1 {
		var one [1]item
		items = one[:0]
	} else {
		var buf [8]item
		items = buf[:0]
	}
	for i := range entries {
		e := &entries[i]
		ck := counterKey{key: e.Key, window: Micros(e.Limit.Window)}
		dup := false
		for j := range items {
			if items[j].ck == ck && items[j].alg == e.Limit.Algorithm {
				// The same counter twice in one batch takes both costs
				// under the tighter limit.
				items[j].cost += e.cost()
				items[j].limit = Tighter(items[j].limit, e.Limit)
				dup = true
				break
			}
		}
		if !dup {
			// Fill a zeroed slot in place rather than copy a literal in.
			if len(items) < cap(items) {
				items = items[:len(items)+1]
			} else {
				items = append(items, item{})
			}
			it := &items[len(items)-1]
			it.ck, it.alg, it.limit, it.cost, it.shard = ck, e.Limit.Algorithm, e.Limit, e.cost(), m.shardOf(e.Key)
		}
	}
	// A debit records whatever the verdict (Bounds.Check made the batch
	// all debits or none), and has no receipts: the usage happened, so a
	// caller that gave up on the answer gives nothing back.
	debit := entries[0].Debit
	if debit {
		want = wantNothing
	}
	for reclaimed := false; ; reclaimed = true {
		m.lock(items)
		now := m.clock.now()
		allowed := true
		for i := range items {
			it := &items[i]
			if debit {
				it.out = m.peekDebit(&m.shards[it.shard], it, now)
				allowed = allowed && it.out.Allowed
				continue
			}
			if it.cost > it.limit.Capacity() {
				it.out = Outcome{Wait: math.MaxInt64, Remaining: it.limit.Capacity()}
				allowed = false
				continue
			}
			it.out = m.peek(&m.shards[it.shard], it, now)
			allowed = allowed && it.out.Allowed
		}
		var rs []Receipt
		var err error
		if (allowed || debit) && record {
			if want != wantNothing {
				rs = make([]Receipt, 0, len(items))
			}
			rs, err = m.record(items, now, rs)
		}
		m.unlock(items)
		if err == errFull {
			if !reclaimed {
				// Counters that expired since the last sweep do not count
				// against the bound: drop them and decide again (the state
				// may have changed while no lock was held).
				m.budget.reclaim()
				continue
			}
			err = m.budget.fullError()
		}
		if err != nil {
			return nil, err
		}
		m.verdict(v, items, now, allowed, record && want == wantRelease, rs)
		return rs, nil
	}
}

// lock takes the shards of items in ascending order, each once, so two
// batches never wait on each other in a cycle.
func (m *Memory) lock(items []item) {
	if len(items) == 1 {
		m.shards[items[0].shard].mu.Lock()
		return
	}
	// Insertion sort: batches are small, and sort.Slice would allocate.
	for i := 1; i < len(items); i++ {
		for j := i; j > 0 && items[j].shard < items[j-1].shard; j-- {
			items[j], items[j-1] = items[j-1], items[j]
		}
	}
	for i := range items {
		if i == 0 || items[i].shard != items[i-1].shard {
			m.shards[items[i].shard].mu.Lock()
		}
	}
}

func (m *Memory) unlock(items []item) {
	for i := range items {
		if i == 0 || items[i].shard != items[i-1].shard {
			m.shards[items[i].shard].mu.Unlock()
		}
	}
}

// peek decides one counter under its shard's lock, recording nothing.
func (m *Memory) peek(s *shard, it *item, now int64) Outcome {
	switch it.alg {
	case SlidingLog, Concurrency:
		if it.log = s.logsOf(it.alg)[it.ck]; it.log != nil {
			return it.log.Decide(now, it.limit, it.cost)
		}
		var st LogState
		return st.Decide(now, it.limit, it.cost)
	case SlidingWindow:
		if it.wptr = s.windows[it.ck]; it.wptr != nil {
			it.window, it.found = *it.wptr, true
		} else {
			it.window, it.found = WindowState{}, false
		}
		return it.window.Decide(now, it.limit, it.cost) // advances it.window
	case FixedWindow:
		if it.fptr = s.fixed[it.ck]; it.fptr != nil {
			it.fixed, it.found = *it.fptr, true
		} else {
			it.fixed, it.found = FixedState{}, false
		}
		return it.fixed.Decide(now, it.limit, it.cost) // advances it.fixed
	default:
		// Holds that expired are settled (into the stored state) first.
		held := m.heldAt(s, it.ck, now)
		it.held = held
		if it.bptr = s.buckets[it.ck]; it.bptr != nil {
			it.bucket, it.found = *it.bptr, true
		} else {
			it.bucket, it.found = BucketState{}, false
		}
		// When allowed, it.bucket becomes the state after this call,
		// which record writes back if the whole batch passes.
		return it.bucket.decide(now, it.limit, it.cost, held)
	}
}

// peekDebit is peek for a debit: the outcome of DecideDebit, with the
// state read (and, for a bucket, the state after the debit) kept for
// record, as peek keeps them.
func (m *Memory) peekDebit(s *shard, it *item, now int64) Outcome {
	switch it.alg {
	case SlidingLog, Concurrency:
		if it.log = s.logsOf(it.alg)[it.ck]; it.log != nil {
			return it.log.DecideDebit(now, it.limit, it.cost)
		}
		var st LogState
		return st.DecideDebit(now, it.limit, it.cost)
	case SlidingWindow:
		if it.wptr = s.windows[it.ck]; it.wptr != nil {
			it.window, it.found = *it.wptr, true
		} else {
			it.window, it.found = WindowState{}, false
		}
		return it.window.DecideDebit(now, it.limit, it.cost)
	case FixedWindow:
		if it.fptr = s.fixed[it.ck]; it.fptr != nil {
			it.fixed, it.found = *it.fptr, true
		} else {
			it.fixed, it.found = FixedState{}, false
		}
		return it.fixed.DecideDebit(now, it.limit, it.cost)
	default:
		held := m.heldAt(s, it.ck, now)
		it.held = held
		if it.bptr = s.buckets[it.ck]; it.bptr != nil {
			it.bucket, it.found = *it.bptr, true
		} else {
			it.bucket, it.found = BucketState{}, false
		}
		return it.bucket.decideDebit(now, it.limit, it.cost, held)
	}
}

// Tighter returns the limit a batch that names one counter twice counts
// it under: the smaller Uses and the smaller capacity (a token bucket's
// Burst).
func Tighter(a, b Limit) Limit {
	c := min(a.Capacity(), b.Capacity())
	a.Uses = min(a.Uses, b.Uses)
	if a.Algorithm == TokenBucket && (a.Burst != 0 || b.Burst != 0) {
		a.Burst = c
	}
	return a
}

func (m *Memory) record(items []item, now int64, rs []Receipt) ([]Receipt, error) {
	// Reserve the counters this call adds first, so a bound refuses the
	// whole batch before anything is recorded.
	reserved := false
	if m.budget != nil {
		added := 0
		for i := range items {
			if !m.has(&m.shards[items[i].shard], &items[i]) {
				added++
			}
		}
		if added > 0 && !m.budget.reserve(added) {
			return nil, errFull
		}
		reserved = true
	}
	for i := range items {
		it := &items[i]
		s := &m.shards[it.shard]
		r := Receipt{Key: it.ck.key, Limit: it.limit, Cost: it.cost, At: now}
		switch it.alg {
		case SlidingLog, Concurrency:
			st := it.log // read by peek
			if st == nil {
				st = &LogState{}
				s.logsOf(it.alg)[m.ownReserved(it.ck, reserved)] = st
			}
			s.seq++
			r.ID = splitmix(m.idBase + s.seq<<10 + uint64(it.shard))
			st.Record(now, it.cost, r.ID)
			if it.log == nil {
				s.lower(logExpiry(st, it.ck.window))
			}
		case SlidingWindow:
			st := it.window // read and advanced to now by peek
			st.Record(it.cost)
			if it.found {
				*it.wptr = st
			} else {
				it.ck = m.ownReserved(it.ck, reserved)
				p := new(WindowState)
				*p = st
				s.windows[it.ck] = p
				s.lower(windowExpiry(p, it.ck.window))
			}
			r.Start = st.Start
		case FixedWindow:
			st := it.fixed // read and advanced to now by peek
			st.Record(it.cost)
			if it.found {
				*it.fptr = st
			} else {
				it.ck = m.ownReserved(it.ck, reserved)
				p := new(FixedState)
				*p = st
				s.fixed[it.ck] = p
				s.lower(fixedExpiry(p))
			}
			r.After = st.End
		default:
			st := it.bucket // the state after this call, from peek
			if it.found {
				*it.bptr = st
			} else {
				it.ck = m.ownReserved(it.ck, reserved)
				p := new(BucketState)
				*p = st
				s.buckets[it.ck] = p
				s.lower(bucketExpiry(p))
			}
			if rs != nil {
				// Where the call's tokens end: the held tokens lie past
				// them, at the end of the arrival time it left. Only a
				// receipt needs it (a 128-bit division).
				r.After = st.receiptAfter(it.limit, it.held)
				if len(s.moves) > 0 {
					if mv, ok := s.moves[it.ck]; ok {
						r.MoveInc, r.Moved = mv.Stamp(now)
					}
				}
			}
		}
		if rs != nil {
			rs = append(rs, r)
		}
	}
	return rs, nil
}

func (m *Memory) has(s *shard, it *item) bool {
	switch it.alg {
	case SlidingLog, Concurrency:
		return s.logsOf(it.alg)[it.ck] != nil
	case SlidingWindow:
		_, ok := s.windows[it.ck]
		return ok
	case FixedWindow:
		_, ok := s.fixed[it.ck]
		return ok
	default:
		_, ok := s.buckets[it.ck]
		return ok
	}
}

// own counts a new counter and clones its key, so the store never keeps
// a caller's larger buffer alive through a substring.
func (m *Memory) own(ck counterKey) counterKey { return m.ownReserved(ck, false) }

// ownReserved is own for a counter whose place in the budget may have
// been reserved already (reserved: do not count it there again).
func (m *Memory) ownReserved(ck counterKey, reserved bool) counterKey {
	m.keys.Add(1)
	if m.budget != nil && !reserved {
		m.budget.n.Add(1)
	}
	ck.key = strings.Clone(ck.key)
	return ck
}

// count adds d to the counters held, here and in the budget.
func (m *Memory) count(d int64) {
	m.keys.Add(d)
	if m.budget != nil {
		m.budget.n.Add(d)
	}
}

// verdict fills in *v, which is zero.
func (m *Memory) verdict(v *Verdict, items []item, now int64, allowed, record bool, rs []Receipt) {
	v.Allowed, v.Remaining = allowed, math.MaxInt64
	var wait, reset int64
	for i := range items {
		o := &items[i].out
		v.Remaining = min(v.Remaining, o.Remaining)
		if !o.Allowed {
			wait = max(wait, o.Wait)
		}
		reset = max(reset, o.Reset)
	}
	if allowed {
		v.ResetAt = m.clock.wall(reset)
		if record && rs != nil {
			v.Release = m.releaser(rs)
		}
		return
	}
	at := ceilMilli(satAdd(now, wait))
	v.RetryAt = m.clock.wall(at)
	v.RetryAfter = MicrosDuration(at - now)
}

func (m *Memory) releaser(rs []Receipt) func(context.Context) error {
	var done atomic.Bool
	return func(ctx context.Context) error {
		if done.Swap(true) {
			return nil
		}
		return m.ReleaseReceipts(ctx, rs)
	}
}

// ReleaseReceipts gives back the uses the receipts recorded, as far as
// they are still counted. Releasing twice gives back twice for the
// window and bucket algorithms: callers release once (Verdict.Release
// guards that).
func (m *Memory) ReleaseReceipts(ctx context.Context, rs []Receipt) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := m.clock.now()
	for _, r := range rs {
		ck := counterKey{key: r.Key, window: Micros(r.Limit.Window)}
		s := &m.shards[m.shardOf(r.Key)]
		s.mu.Lock()
		if s.resetSince(ck, r.Limit.Algorithm, r.At) {
			// Recorded before a reset, which gave its uses back already
			// (only window and bucket counters are marked: a log removes
			// its own call by id).
			s.mu.Unlock()
			continue
		}
		// A release can bring a counter's expiry forward (to now, when it
		// gave back the last use): the shard's next follows it down.
		switch r.Limit.Algorithm {
		case SlidingLog, Concurrency:
			if st := s.logsOf(r.Limit.Algorithm)[ck]; st != nil {
				st.Remove(r.ID)
				s.lower(logExpiry(st, ck.window))
			}
		case SlidingWindow:
			if st := s.windows[ck]; st != nil {
				st.Remove(now, ck.window, r.Start, r.Cost)
				s.lower(windowExpiry(st, ck.window))
			}
		case FixedWindow:
			if st := s.fixed[ck]; st != nil {
				st.Remove(now, r.Limit, r.After, r.Cost)
				s.lower(fixedExpiry(st))
			}
		default:
			held := m.heldAt(s, ck, now)
			if st := s.buckets[ck]; st != nil {
				// Release subtracts how far the call moved since it was
				// recorded (see BucketMoves) and records what it gives
				// back as a move of the calls after it.
				mv := s.moves[ck]
				var fresh uint64
				if !mv.Live(now) {
					fresh = m.newInc(s)
				}
				if st.release(now, r.Limit, r.Cost, r.After, r.MoveInc, r.Moved, held, &mv, fresh) {
					s.setMoves(ck, mv, now)
				}
				s.lower(bucketExpiry(st))
			}
		}
		s.mu.Unlock()
	}
	return nil
}

// Receipt identifies one recorded use of one counter, so it can be given
// back exactly. Times are µs on the recording store's clock; Shift moves
// them to another clock.
type Receipt struct {
	// Key is the counter's key.
	Key string
	// Limit is the counter's limit (its algorithm and window name it).
	Limit Limit
	// Cost is the uses recorded.
	Cost int64
	// ID is the call's unique id (sliding log, concurrency slots).
	ID uint64
	// At is when the use was recorded.
	At int64
	// Start is the start of the window it was counted in (sliding window).
	Start int64
	// After is, for a token bucket, where the call's tokens end: the
	// arrival time it left behind, less the tokens then out on leases
	// (they never refill while held: see BucketMoves), rounded up; for a
	// fixed window, the end of the window it was counted in.
	After int64
	// MoveInc and Moved stamp a token bucket's receipt with its moves
	// record as the call was recorded (zeros when it had none): a release
	// subtracts the moves since from After (see BucketMoves). Moved is
	// not a time: Shift leaves it.
	MoveInc uint64
	Moved   int64
}

// Shift moves the receipt's times by d µs: from the recording clock to a
// clock that reads d more at the same instant.
func (r *Receipt) Shift(d int64) {
	r.At += d
	r.Start += d
	r.After += d
}

// newInc returns a new moves record's incarnation: unique per store (the
// call ids' sequence) and random across stores (the seed), never 0.
// Callers hold s.mu.
func (m *Memory) newInc(s *shard) uint64 {
	s.seq++
	x := splitmix(m.idBase ^ 0x6d6f766573 + s.seq)
	if x == 0 {
		x = 1
	}
	return x
}

// movesUntil is the Until of ck's moves record (MinInt64: none).
// Callers hold s.mu.
func (s *shard) movesUntil(ck counterKey) int64 {
	if len(s.moves) == 0 {
		return math.MinInt64
	}
	if mv, ok := s.moves[ck]; ok {
		return mv.Until
	}
	return math.MinInt64
}

// setMoves stores ck's moves record (dropping it when it is no longer
// live). Callers hold s.mu.
func (s *shard) setMoves(ck counterKey, mv BucketMoves, now int64) {
	if !mv.Live(now) {
		delete(s.moves, ck)
		return
	}
	if s.moves == nil {
		s.moves = map[counterKey]BucketMoves{}
	}
	if _, ok := s.moves[ck]; !ok {
		ck.key = strings.Clone(ck.key)
	}
	s.moves[ck] = mv
	s.lower(mv.Until)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
