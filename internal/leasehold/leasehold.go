package leasehold

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/limiter"
)

// Counter names one counter: a key under one algorithm and window.
type Counter struct {
	Key       string
	Algorithm limiter.Algorithm
	Window    time.Duration
}

// CounterOf names the counter an entry takes uses of.
func CounterOf(e limiter.Entry) Counter {
	return Counter{Key: e.Key, Algorithm: e.Limit.Algorithm, Window: e.Limit.Window}
}

// Grant is an owner's lease: up to K uses of Key under Limit, for Length
// from the grant by the owner's clock.
type Grant struct {
	ID     uint64
	Owner  string
	Key    string
	Limit  limiter.Limit
	K      int64
	Length time.Duration
}

// Use is one use made under a lease: Cost uses AgeUs before the return
// was made (µs on the holder's clock), under the holder's id ID (a
// release after the return names it at the owner).
type Use struct {
	ID    uint64
	Cost  int64
	AgeUs int64
}

// Return gives a lease back: the uses made, the rest unused.
type Return struct {
	ID    uint64
	Owner string
	Key   string
	Limit limiter.Limit
	K     int64
	Uses  []Use
	// Used is the sum of the uses' costs.
	Used int64
}

// Ask asks an owner for a lease of Key's counter under Limit: K uses for
// Length.
type Ask struct {
	Key    string
	Limit  limiter.Limit
	K      int64
	Length time.Duration
}

// Release gives back one use a lease admitted after the lease went back
// (the owner holds it under the holder's id; sliding logs only).
type Release struct {
	Key   string
	Limit limiter.Limit
	ID    uint64
	Cost  int64
}

// Config configures a Table.
type Config struct {
	// Now reads the holder's monotonic clock. Required.
	Now func() time.Time
	// Length is the lease length asked for. Default 100 ms (the owner may
	// grant less, and never more than the limit's window).
	Length time.Duration
	// Hot is how many calls of one counter within HotSpan make it worth a
	// lease. Default 4: a few calls within one round trip.
	Hot int
	// HotSpan is the span the calls are counted over. Default 5 ms.
	HotSpan time.Duration
	// MinK is the least number of uses asked for. Default 8.
	MinK int64
	// GroupSpan: uses made within it of each other (and not releasable)
	// go back as one, at the latest one's age, so a return stays small.
	// Default 1 ms; negative: every use on its own.
	GroupSpan time.Duration
	// Seed seeds the ids of local uses. Default 0 is a valid seed; two
	// holders of one counter should differ (the owner matches uses by id).
	Seed uint64
}

// Stats count a table's work.
type Stats struct {
	// Granted counts leases installed; Returned those given back
	// (Expired those among them that ran out of time); Recalled those the
	// owner asked back.
	Granted, Returned, Expired, Recalled atomic.Int64
	// Local counts decisions made from leases; Used the uses they took.
	Local, Used atomic.Int64
}

// Table is a holder's leases. It is safe for concurrent use.
type Table struct {
	cfg    Config
	mu     sync.Mutex
	leases map[Counter]*lease
	meters map[Counter]*meter
	seq    uint64
	swept  time.Time
	stats  Stats

	// The cold filter. Every call of a fleet client or an embedded node
	// passes the table, and almost all of them are of counters that hold
	// no lease and are not hot: those are answered without the lock or a
	// map lookup (two lookups and a lock shared by every caller were 4-6%
	// of a client's CPU). A counter hashes to a slot; recent holds the
	// slot's last call (its time and the counter's fingerprint), leased
	// the number of leases held of the slot's counters. A call goes the
	// exact way (the lock, its meter, its lease) only when its slot holds
	// a lease or saw a call within HotSpan; a counter with Hot calls
	// within HotSpan always does from its second on, and its meter counts
	// the first too (by the fingerprint), so a hot counter asks on the
	// same call as without the filter. Collisions only send more calls
	// the exact way. A call answered by the filter finds no lease (none is
	// held in its slot) and asks for none: its counter had no call within
	// HotSpan, so it is not hot now, though its meter (which the filter's
	// calls do not reach) may still call it hot from an earlier span: such
	// a counter asks again on its next call within HotSpan.
	epoch  time.Time
	recent [filterSlots]atomic.Uint64 // (µs since epoch + 1) << 16 | fingerprint; 0: none
	leased [filterSlots]atomic.Int32  // written under mu
}

// filterSlots is the cold filter's size: 48 KiB a table.
const filterSlots = 1 << 12

// slotOf hashes a counter to its filter slot and fingerprint.
func slotOf(c Counter) (slot int, fp uint64) {
	h := xxhash.Sum64String(c.Key) ^ splitmix(uint64(c.Algorithm)<<56^uint64(c.Window))
	return int(h & (filterSlots - 1)), h >> 48
}

// stamp is a filter slot's record of a call at now with fingerprint fp.
func (t *Table) stamp(now time.Time, fp uint64) uint64 {
	return uint64(max(now.Sub(t.epoch)/time.Microsecond, 0)+1)<<16 | fp
}

// recentCall reads a slot's record: whether its last call was within
// HotSpan before now, when it was, and whether it was of the counter with
// fingerprint fp.
func (t *Table) recentCall(rec uint64, now time.Time, fp uint64) (within bool, at time.Time, same bool) {
	if rec == 0 {
		return false, time.Time{}, false
	}
	at = t.epoch.Add(time.Duration(rec>>16-1) * time.Microsecond)
	return now.Sub(at) < t.cfg.HotSpan, at, rec&0xffff == fp
}

// cold records a call of c at now in the filter and reports whether the
// filter answers it (no lease, no ask); when not, prev is the slot's
// previous call when it was c's within HotSpan (zero otherwise), for a new
// meter to count.
func (t *Table) cold(c Counter, now time.Time) (cold bool, prev time.Time) {
	slot, fp := slotOf(c)
	within, at, same := t.recentCall(t.recent[slot].Swap(t.stamp(now, fp)), now, fp)
	if !within && t.leased[slot].Load() == 0 {
		return true, time.Time{}
	}
	if within && same {
		prev = at
	}
	return false, prev
}

// hold and unhold keep leases and the filter's count of them together
// (under mu).
func (t *Table) hold(c Counter, l *lease) {
	if t.leases[c] == nil {
		slot, _ := slotOf(c)
		t.leased[slot].Add(1)
	}
	t.leases[c] = l
}

func (t *Table) unhold(c Counter) {
	if t.leases[c] != nil {
		slot, _ := slotOf(c)
		t.leased[slot].Add(-1)
	}
	delete(t.leases, c)
}

type lease struct {
	g     Grant
	start time.Time // when the request left
	end   time.Time // local end: the request's send time plus Length
	uses  []localUse
	used  int64
}

type localUse struct {
	id   uint64
	cost int64
	at   time.Time // the latest use of the group
	// first is the group's first use; own: a use that may be given back
	// on its own (never grouped).
	first time.Time
	own   bool
}

type meter struct {
	from   time.Time
	n      int
	hot    bool
	rate   float64 // calls/s over the last full span
	asking bool
}

// New returns an empty table.
func New(cfg Config) *Table {
	if cfg.Length <= 0 {
		cfg.Length = 100 * time.Millisecond
	}
	if cfg.Hot <= 0 {
		cfg.Hot = 4
	}
	if cfg.HotSpan <= 0 {
		cfg.HotSpan = 5 * time.Millisecond
	}
	if cfg.GroupSpan == 0 {
		cfg.GroupSpan = time.Millisecond
	}
	if cfg.MinK <= 0 {
		cfg.MinK = 8
	}
	return &Table{cfg: cfg, leases: map[Counter]*lease{}, meters: map[Counter]*meter{}, epoch: cfg.Now()}
}

// Stats returns the table's counters.
func (t *Table) Stats() *Stats { return &t.stats }

// Leasable reports whether an entry can be decided from a lease: one
// consume (not a debit) of a sliding log, a fixed window or a token
// bucket (sliding windows are not leased: see owner/lease.go).
func Leasable(e limiter.Entry) bool {
	if e.Debit {
		return false
	}
	switch e.Limit.Algorithm {
	case limiter.SlidingLog, limiter.FixedWindow, limiter.TokenBucket:
		return true
	}
	return false
}

// Take admits e locally when a lease of its counter is in force and holds
// enough unused uses: ok, and the use's id (for Give). Otherwise it does
// nothing (the caller asks the owner). releasable says the caller may give
// the use back after the lease went back (its verdict has a Release): it
// then travels on its own, under its id; other uses made within
// GroupSpan of each other travel as one, at the latest one's age.
func (t *Table) Take(e limiter.Entry, releasable bool) (id uint64, ok bool) {
	c := CounterOf(e)
	if slot, _ := slotOf(c); t.leased[slot].Load() == 0 {
		return 0, false // no lease of c (nor of any counter of its slot)
	}
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.takeUse(c, e, releasable, now)
}

// takeUse is Take under t.mu.
func (t *Table) takeUse(c Counter, e limiter.Entry, releasable bool, now time.Time) (id uint64, ok bool) {
	cost := max(e.Cost, 1)
	l := t.leases[c]
	if l == nil || !now.Before(l.end) || l.used+cost > l.g.K || l.g.Limit != e.Limit {
		return 0, false
	}
	t.seq++
	id = splitmix(t.cfg.Seed + t.seq)
	if n := len(l.uses); !releasable && n > 0 && !l.uses[n-1].own && now.Sub(l.uses[n-1].first) < t.cfg.GroupSpan {
		// One more in the group: it travels at the latest use's age, so
		// it counts at least as long as each use in it.
		l.uses[n-1].cost += cost
		l.uses[n-1].at = now
	} else {
		l.uses = append(l.uses, localUse{id: id, cost: cost, at: now, first: now, own: releasable})
	}
	l.used += cost
	t.stats.Local.Add(1)
	t.stats.Used.Add(cost)
	return id, true
}

// Give gives back a use Take admitted while its lease is still held here
// (true); false: the lease was returned, and the use is the owner's to
// give back (by its id).
func (t *Table) Give(e limiter.Entry, id uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.leases[CounterOf(e)]
	if l == nil {
		return false
	}
	for i, u := range l.uses {
		if u.id == id && u.own {
			l.used -= u.cost
			l.uses = slices.Delete(l.uses, i, i+1)
			return true
		}
	}
	return false
}

// LeaseOf names the lease a use Take admitted is held under, while it is
// held here.
func (t *Table) LeaseOf(e limiter.Entry) (Grant, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.leases[CounterOf(e)]; l != nil {
		return l.g, true
	}
	return Grant{}, false
}

// Want counts a call of e and reports whether to ask its owner for a
// lease now, and for how many uses over how long: e's counter is hot (at
// least Hot calls within HotSpan), holds no lease with room left, and no
// request for one is under way. A true answer marks a request under way:
// the caller then calls Install or Failed.
func (t *Table) Want(e limiter.Entry) (k int64, length time.Duration, ok bool) {
	if !Leasable(e) {
		return 0, 0, false
	}
	now := t.cfg.Now()
	c := CounterOf(e)
	cold, prev := t.cold(c, now)
	if cold {
		return 0, 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.want(c, now, prev)
}

// TakeOrAsk is Want then Take under one lock and one clock reading (the
// fleet client's hot path): whether e was admitted from a lease (id, ok),
// and whether to ask for a lease now (asking, with k and length).
func (t *Table) TakeOrAsk(e limiter.Entry, releasable bool) (id uint64, ok bool, k int64, length time.Duration, asking bool) {
	if !Leasable(e) {
		return 0, false, 0, 0, false
	}
	now := t.cfg.Now()
	c := CounterOf(e)
	cold, prev := t.cold(c, now)
	if cold {
		return 0, false, 0, 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k, length, asking = t.want(c, now, prev)
	id, ok = t.takeUse(c, e, releasable, now)
	return id, ok, k, length, asking
}

// want is Want under t.mu; prev, when not zero, is an earlier call of c
// within HotSpan that only the cold filter saw (a new meter counts it).
func (t *Table) want(c Counter, now, prev time.Time) (k int64, length time.Duration, ok bool) {
	m := t.meters[c]
	if m == nil {
		m = &meter{from: now}
		if !prev.IsZero() {
			m.from, m.n = prev, 1
		}
		c.Key = strings.Clone(c.Key)
		t.meters[c] = m
	}
	m.n++
	if span := now.Sub(m.from); span >= t.cfg.HotSpan {
		m.rate = float64(m.n) / span.Seconds()
		m.hot = m.n >= t.cfg.Hot
		m.n, m.from = 0, now
	} else if m.n >= t.cfg.Hot {
		m.hot = true
		if m.rate == 0 {
			m.rate = float64(m.n) / max(span, time.Millisecond).Seconds()
		}
	}
	if !m.hot || m.asking {
		return 0, 0, false
	}
	if l := t.leases[c]; l != nil && l.end.Sub(now) > 2*l.end.Sub(l.start)/3 && l.used < l.g.K/3 {
		// Renew ahead: the next lease is asked for when this one is a
		// third spent or a third over, so it arrives before calls must go
		// to the owner (a round trip on a loaded machine can take tens of
		// ms).
		return 0, 0, false
	}
	m.asking = true
	// Four times what the last span's rate would use over the lease (it
	// is renewed half-way, and the rate may grow): the owner trims it to a
	// fair share of what is left.
	k = max(t.cfg.MinK, int64(4*m.rate*t.cfg.Length.Seconds())+1)
	return k, t.cfg.Length, true
}

// Install holds g, asked for at sent (the holder's clock when the request
// left: the lease ends here at sent+Length, before it ends at the owner).
// A lease of the same counter still held is given back: its return, when
// ok, is for the caller to send.
func (t *Table) Install(sent time.Time, g Grant) (old Return, ok bool) {
	c := Counter{Key: g.Key, Algorithm: g.Limit.Algorithm, Window: g.Limit.Window}
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.meters[c]; m != nil {
		m.asking = false
	}
	if l := t.leases[c]; l != nil {
		old, ok = t.take(c, l, now), true
	}
	if g.K > 0 {
		t.hold(c, &lease{g: g, start: sent, end: sent.Add(g.Length)})
		t.stats.Granted.Add(1)
	}
	return old, ok
}

// Failed ends a request for a lease of e's counter that got none.
func (t *Table) Failed(e limiter.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.meters[CounterOf(e)]; m != nil {
		m.asking = false
	}
}

// Due takes the leases that ended here or are spent, and the meters of
// counters no longer hot, and returns the leases' returns to send.
func (t *Table) Due() []Return {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Return
	for _, c := range sortedCounters(t.leases) {
		l := t.leases[c]
		if expired := !now.Before(l.end); expired || l.used >= l.g.K {
			if expired {
				t.stats.Expired.Add(1)
			}
			out = append(out, t.take(c, l, now))
		}
	}
	if now.Sub(t.swept) > 100*t.cfg.HotSpan {
		// Meters of keys not called lately go, at most this often: a
		// caller of many cold keys must not pay a sweep per tick.
		t.swept = now
		for c, m := range t.meters {
			if now.Sub(m.from) > 100*t.cfg.HotSpan && !m.asking {
				delete(t.meters, c)
			}
		}
	}
	return out
}

// Recall takes the leases with the ids given (the owner asks them back)
// and returns their returns.
func (t *Table) Recall(ids []uint64) []Return {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Return
	for _, c := range sortedCounters(t.leases) {
		if l := t.leases[c]; slices.Contains(ids, l.g.ID) {
			t.stats.Recalled.Add(1)
			out = append(out, t.take(c, l, now))
		}
	}
	return out
}

// All takes every lease (the holder closes).
func (t *Table) All() []Return {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Return
	for _, c := range sortedCounters(t.leases) {
		out = append(out, t.take(c, t.leases[c], now))
	}
	return out
}

// take removes a lease and makes its return. Ages are read now, at the
// return; a use is never younger than 0.
func (t *Table) take(c Counter, l *lease, now time.Time) Return {
	t.unhold(c)
	t.stats.Returned.Add(1)
	r := Return{ID: l.g.ID, Owner: l.g.Owner, Key: l.g.Key, Limit: l.g.Limit, K: l.g.K, Used: l.used}
	if l.g.Limit.Algorithm == limiter.TokenBucket {
		// A bucket's return is the count used (the owner takes them at
		// the return): no ages, one use.
		if l.used > 0 {
			r.Uses = []Use{{Cost: l.used}}
		}
		return r
	}
	r.Uses = make([]Use, len(l.uses))
	for i, u := range l.uses {
		r.Uses[i] = Use{ID: u.id, Cost: u.cost, AgeUs: max(int64(now.Sub(u.at)/time.Microsecond), 0)}
	}
	return r
}

// Held is the number of leases held.
func (t *Table) Held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.leases)
}

func sortedCounters(m map[Counter]*lease) []Counter {
	cs := make([]Counter, 0, len(m))
	for c := range m {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b Counter) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		if a.Algorithm != b.Algorithm {
			return int(a.Algorithm) - int(b.Algorithm)
		}
		return int(a.Window - b.Window)
	})
	return cs
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
