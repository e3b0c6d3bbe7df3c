package owner

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/limiter"
)

// Leases (issue #21): the owner's side. An owner grants a caller up to K
// uses of one counter for a short time; the caller decides them locally
// and gives back what it used. The exactness argument:
//
//   - Sliding log. The grant records the K uses as one call at the lease's
//     end (limiter.Memory.ReserveLog): it counts from the grant until
//     end+Window, so any use made under the lease, at any moment up to the
//     end, leaves the log no earlier than it would have had it been
//     recorded when it was made. The holder ends the lease early by the
//     grant's round trip (its length counts from the request's send), so
//     every use it made happened before the owner's end. The return
//     replaces the reservation with the uses made, placed at the owner's
//     receipt time minus their ages: never earlier than they happened
//     (transit only delays), and clamped to the lease's end. At every
//     instant the log counts at least every use made, so no window ever
//     holds more than the limit.
//   - Fixed window. The grant takes K uses in the current window and the
//     lease ends with it; the return gives back the unused ones (a
//     release). A use made under it falls in the window it was counted in.
//   - Token bucket (GCRA: arrival time TAT, T = Window/Uses per token,
//     capacity B = Burst or Uses; the level is B - (TAT-now)/T, full when
//     TAT <= now). Taking K tokens at the grant alone is not exact: they
//     would refill while the holder still holds them, and a holder
//     spending them late adds to a full bucket. So the owner holds them
//     (limiter.Memory.GrantBucket): with held the tokens out on leases of
//     the counter, the bucket keeps level + held <= B, i.e. TAT >= now +
//     held*T. Every decision on it (consume, peek, debit, release, grant,
//     return) starts from base = max(TAT, now + held*T) where plain GCRA
//     starts from max(TAT, now). Between events held is constant, so the
//     floor applied lazily at the next event is the one that held all
//     along; an event that changes held applies it first with the held
//     before the change. A grant of k takes k as a consume of cost k
//     would (the same burst check): TAT = base + k*T, held += k. A return
//     of k of which u were used: the floor with the old held, then held
//     -= k and TAT -= (k-u)*T (never more than k-u; a return whose hold
//     is gone gives nothing). A holder that never returns (it crashed):
//     the hold ends at the lease's end plus ReturnSlack with nothing back,
//     the floor applied at that instant (the store settles expired holds
//     in their order at the next event, so no refill slips in between).
//     Why it is exact: take the model M, a bucket of the same B and rate
//     that takes each use when it is made (and never sees a lease); let
//     unused be the tokens granted and not yet used. Then level + unused
//     <= M at every step. A grant moves k from level to unused. A use
//     under a lease lowers M and unused by one. Refill raises level and M
//     at the same rate until one stops at its cap, and level's cap, B -
//     held, is at most M's, B (held >= unused). A direct call is admitted
//     only if level >= cost, so M >= cost admits it too, and both drop by
//     it. A return moves the unused back to level (the used are in M
//     already); an expiry moves nothing back. A holder's own give-back
//     (a release while it holds the lease) just makes the use not happen.
//     So every admission, direct or leased, is one M admits: never more
//     than a token bucket without leases. The cost is under-admission:
//     the tokens used under a lease refill only from its return (M refills
//     them from their use), and a crashed holder's unused ones from the
//     hold's expiry. Near the limit (the bucket's TAT ahead of now by more
//     than the held tokens, i.e. not refilling into the floor) nothing
//     binds and the arrival time is the same sum of the uses made with
//     and without leases, so the first refusal and its RetryAt are the
//     same too (with the recall below). A release of a leased use after
//     its lease went back gives nothing back (as a fixed window's):
//     GCRA's give-back (BucketState.Remove) needs the arrival time the
//     use left behind, which the owner, taking the uses at the return,
//     does not have, and giving back a whole token then can admit more
//     than M (a use refilled long ago, the bucket since drained by others:
//     its token would come back on top). A direct call's release gives
//     back what of its own tokens is still outstanding, never a held one
//     nor one taken after it: the held tokens never refill, so the
//     refill goes to the calls' tokens and the held ones sit past them
//     (a return or an expiry puts the used ones after every call made
//     so far); the receipt's After is where the call's tokens end, the
//     arrival time less the tokens held as it was recorded (see
//     limiter.BucketMoves), lowered at the release by the releases since
//     (the moves record). The holds live beside the buckets (a map per
//     store shard, only for buckets with leases out), travel in the
//     counter's state (limiter.CounterState.Holds) to the replicas
//     before the grant answers (shipReservations) and with a hand-off,
//     so a new owner keeps the floor; a return that reaches it finds the
//     hold by the lease's id.
//   - Sliding window is not leased. It could be leased like a fixed window
//     within its current sub-window, but its sub-windows are short at the
//     limits where leases pay.
//   - Near the limit, recall. A direct call the engine would refuse while
//     uses of its counter are out on leases is decided again after the
//     owner asked the holders to return them (Recall, bounded by
//     LeaseConfig.RecallTimeout): the returns replace reservations with
//     the uses made, so the refusal sees the uses actually made, and the
//     first refusal and its RetryAt are those of a run without leases
//     (when every holder answers). A holder that does not answer keeps its
//     reservation: the refusal is then early, never late.
//   - A holder that crashes never returns: its K uses count until
//     end+Window (the reservation), conservative. An owner that crashes
//     passes the reservation to its replica inside the counter's state;
//     the lease's id is the reservation's id, so a return that reaches
//     the new owner removes it there. A hand-off moves the reservation
//     with the state and the lease book with exportLeases/importLeases.

// LeaseConfig configures the owner's side of leases.
type LeaseConfig struct {
	// MinFree: a lease is granted only while the counter's remaining
	// budget is at least this fraction of its limit (of a token bucket's
	// capacity). Default 0.25.
	MinFree float64
	// MaxLength caps a lease's length (and the window caps it too).
	// Default 1 s.
	MaxLength time.Duration
	// RecallTimeout bounds how long a decision waits for holders to
	// return leases it recalled, or, for holders the recall does not
	// reach (a client without a recall stream, a node cut off), for
	// their leases to end and come back. Default 250 ms (holders ask for
	// leases of 200 ms).
	RecallTimeout time.Duration
	// ReturnSlack is how long after a lease's end its holder's own return
	// is expected (holders return ended leases on a timer). Default 10 ms.
	ReturnSlack time.Duration
	// Seed seeds lease ids. Default 0 is a valid seed.
	Seed uint64
}

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.MinFree <= 0 {
		c.MinFree = 0.25
	}
	if c.MaxLength <= 0 {
		c.MaxLength = time.Second
	}
	if c.RecallTimeout <= 0 {
		c.RecallTimeout = 250 * time.Millisecond
	}
	if c.ReturnSlack <= 0 {
		c.ReturnSlack = 10 * time.Millisecond
	}
	return c
}

// LeaseStats count an owner's leases. HeldOut is a gauge: the uses out on
// leases now. Unreplicated counts grants taken back before they were
// answered because their reservation did not reach every replica (they
// count as granted and returned too).
type LeaseStats struct {
	Granted, Returned, Expired, Recalled, Used, HeldOut, Unreplicated atomic.Int64
}

// LeaseRequest asks an owner for a lease of Key under Limit.
type LeaseRequest struct {
	// Holder names the caller, for recalls (a node's ring name, or a
	// client's stream name).
	Holder string
	Key    string
	Limit  limiter.Limit
	// K is the uses asked for; Length how long.
	K      int64
	Length time.Duration
}

// RecallFunc asks holder to give back the leases ids at once.
type RecallFunc func(ctx context.Context, holder string, ids []uint64) ([]leasehold.Return, error)

// leases is an owner's book of leases out.
type leases struct {
	cfg    LeaseConfig
	self   string
	rt     Runtime
	engine *limiter.Memory
	recall RecallFunc

	mu         sync.Mutex
	seq        uint64
	lastExpire int64 // µs on the engine's clock
	out        map[CounterID]map[uint64]*outLease

	stats LeaseStats
}

type outLease struct {
	id     uint64
	holder string
	key    string
	limit  limiter.Limit
	k      int64
	res    limiter.LogReservation // sliding log
	rc     limiter.Receipt        // fixed window: the K uses taken
	end    int64                  // µs on the engine's clock
}

func newLeases(cfg LeaseConfig, self string, rt Runtime, engine *limiter.Memory, recall RecallFunc) *leases {
	return &leases{cfg: cfg.withDefaults(), self: self, rt: rt, engine: engine, recall: recall, out: map[CounterID]map[uint64]*outLease{}}
}

func counterOf(key string, l limiter.Limit) CounterID {
	return CounterID{Key: key, Algorithm: l.Algorithm, Window: l.Window}
}

// leasable says whether counters under l are leased.
func leasable(l limiter.Limit) bool {
	return l.Algorithm == limiter.SlidingLog || l.Algorithm == limiter.FixedWindow || l.Algorithm == limiter.TokenBucket
}

// grant answers a lease request: a grant of K > 0 uses, or K = 0 (none:
// the key is not leased, or its remaining budget is small).
func (b *leases) grant(ctx context.Context, req LeaseRequest) (leasehold.Grant, error) {
	none := leasehold.Grant{Owner: b.self, Key: req.Key, Limit: req.Limit}
	if !leasable(req.Limit) || req.K <= 0 || req.Length <= 0 {
		return none, nil
	}
	e := []limiter.Entry{{Key: req.Key, Limit: req.Limit}}
	v, err := b.engine.PeekMany(ctx, e)
	if err != nil || !v.Allowed {
		return none, err
	}
	free := v.Remaining + 1
	// Of the limit, or of a token bucket's capacity (its Burst).
	if float64(free) < b.cfg.MinFree*float64(req.Limit.Capacity()) {
		return none, nil
	}
	c := counterOf(req.Key, req.Limit)
	b.mu.Lock()
	others := 0
	for _, o := range b.out[c] {
		if o.holder != req.Holder {
			others++
		}
	}
	b.seq++
	id := splitmix64(b.cfg.Seed + b.seq)
	b.mu.Unlock()
	// A fair share: half of what is left split among the holders, this
	// one included, so a late holder still finds budget.
	k := min(req.K, free/int64(2*(others+1)))
	length := min(req.Length, b.cfg.MaxLength, req.Limit.Window)
	if k < 1 {
		return none, nil
	}
	ol := &outLease{id: id, holder: req.Holder, key: req.Key, limit: req.Limit, k: k}
	now := b.engine.Now()
	switch req.Limit.Algorithm {
	case limiter.SlidingLog:
		o, res, err := b.engine.ReserveLog(ctx, req.Key, req.Limit, k, length, id)
		if err != nil || !o.Allowed {
			return none, err
		}
		ol.res, ol.end = res, res.End
	case limiter.TokenBucket:
		// The k tokens are taken and held: until the return (or the
		// hold's expiry, the lease's end plus the return's slack) the
		// bucket stays at most B - held, here and at the replicas.
		ol.end = now + limiter.Micros(length)
		o, err := b.engine.GrantBucket(ctx, req.Key, req.Limit, k, id, ol.end+limiter.Micros(b.cfg.ReturnSlack))
		if err != nil || !o.Allowed {
			return none, err
		}
	default: // fixed window
		e[0].Cost = k
		v, rs, err := b.engine.ConsumeReceipts(ctx, e, true)
		if err != nil || !v.Allowed {
			return none, err
		}
		ol.rc = rs[0]
		// The lease ends with the window its uses are counted in.
		ol.end = min(now+limiter.Micros(length), rs[0].After)
		length = limiter.MicrosDuration(ol.end - now)
		if length < time.Millisecond {
			_ = b.engine.ReleaseReceipts(context.WithoutCancel(ctx), rs)
			return none, nil
		}
	}
	b.mu.Lock()
	m := b.out[c]
	if m == nil {
		m = map[uint64]*outLease{}
		b.out[c] = m
	}
	m[id] = ol
	b.mu.Unlock()
	b.stats.Granted.Add(1)
	b.stats.HeldOut.Add(k)
	return leasehold.Grant{ID: id, Owner: b.self, Key: req.Key, Limit: req.Limit, K: k, Length: length}, nil
}

// settle takes a lease back: its uses replace the reservation. A return
// of a lease this owner did not grant (it took the key over by a crash
// or a hand-off that lost the book) still settles a sliding log: the
// reservation carries the lease's id.
func (b *leases) settle(ret leasehold.Return) {
	c := counterOf(ret.Key, ret.Limit)
	b.mu.Lock()
	ol := b.out[c][ret.ID]
	if ol != nil {
		delete(b.out[c], ret.ID)
		if len(b.out[c]) == 0 {
			delete(b.out, c)
		}
	}
	b.mu.Unlock()
	now := b.engine.Now()
	var used int64
	for _, u := range ret.Uses {
		used += u.Cost
	}
	b.stats.Returned.Add(1)
	b.stats.Used.Add(used)
	if ol != nil {
		b.stats.HeldOut.Add(-ol.k)
	}
	switch ret.Limit.Algorithm {
	case limiter.SlidingLog:
		res := limiter.LogReservation{Key: ret.Key, Limit: ret.Limit, ID: ret.ID, K: ret.K, Granted: 0, End: now}
		if ol != nil {
			res = ol.res
		}
		uses := make([]limiter.LogUse, len(ret.Uses))
		for i, u := range ret.Uses {
			uses[i] = limiter.LogUse{At: now - u.AgeUs, Cost: u.Cost, ID: u.ID}
		}
		b.engine.SettleLog(res, uses)
	case limiter.TokenBucket:
		// The hold names the lease: it came with the state to a replica
		// or a new owner, so a return that reaches them finds it even
		// without the book. A hold gone (expired) gives nothing back.
		b.engine.ReturnBucket(ret.Key, ret.Limit, ret.ID, used)
	case limiter.FixedWindow:
		if ol != nil && ol.k > used {
			rc := ol.rc
			rc.Cost = ol.k - used
			_ = b.engine.ReleaseReceipts(context.Background(), []limiter.Receipt{rc})
		}
	}
}

// expire forgets leases whose holders never returned them: their
// reservations stay counted (until end+Window for a log, the window's end
// for a fixed window).
func (b *leases) expire(grace time.Duration) {
	now := b.engine.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for c, m := range b.out {
		for id, ol := range m {
			if now > ol.end+limiter.Micros(grace) {
				delete(m, id)
				b.stats.Expired.Add(1)
				b.stats.HeldOut.Add(-ol.k)
			}
		}
		if len(m) == 0 {
			delete(b.out, c)
		}
	}
}

// reservationEnd is when the reservation of lease id on counter c ends
// (µs on the engine's clock).
func (b *leases) reservationEnd(c CounterID, id uint64) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ol := b.out[c][id]; ol != nil {
		return ol.res.End, true
	}
	return 0, false
}

// expireSometimes runs expire at most once a second.
func (b *leases) expireSometimes(grace time.Duration) {
	now := b.engine.Now()
	b.mu.Lock()
	due := now-b.lastExpire >= 1_000_000
	if due {
		b.lastExpire = now
	}
	b.mu.Unlock()
	if due {
		b.expire(grace)
	}
}

// latestEnd is the latest end of the leases out on the entries' counters
// (µs on the engine's clock); out is false when there are none.
func (b *leases) latestEnd(entries []limiter.Entry) (end int64, out bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range entries {
		for _, ol := range b.out[counterOf(e.Key, e.Limit)] {
			end, out = max(end, ol.end), true
		}
	}
	return end, out
}

// outstanding lists, by holder, the leases out on the entries' counters.
func (b *leases) outstanding(entries []limiter.Entry) map[string][]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var by map[string][]uint64
	for _, e := range entries {
		for id, ol := range b.out[counterOf(e.Key, e.Limit)] {
			if by == nil {
				by = map[string][]uint64{}
			}
			by[ol.holder] = append(by[ol.holder], id)
		}
	}
	for _, ids := range by {
		slices.Sort(ids)
	}
	return by
}

// consume decides a batch on the engine; when it would refuse while uses
// of its counters are out on leases, it recalls them first and decides
// again, so a refusal counts only uses actually made.
func (b *leases) consume(ctx context.Context, entries []limiter.Entry, record bool) (limiter.Verdict, []limiter.Receipt, error) {
	v, rs, err := b.engine.ConsumeReceipts(ctx, entries, record)
	if err != nil || v.Allowed || entries[0].Debit {
		return v, rs, err
	}
	by := b.outstanding(entries)
	if len(by) == 0 {
		return v, rs, err
	}
	b.recallFrom(ctx, by)
	return b.engine.ConsumeReceipts(ctx, entries, record)
}

// recallFrom asks the holders for their leases back and settles what
// they return, waiting at most RecallTimeout.
func (b *leases) recallFrom(ctx context.Context, by map[string][]uint64) {
	if b.recall == nil {
		return
	}
	ctx, cancel := b.rt.WithTimeout(context.WithoutCancel(ctx), b.cfg.RecallTimeout)
	defer cancel()
	holders := make([]string, 0, len(by))
	for h := range by {
		holders = append(holders, h)
	}
	slices.Sort(holders)
	var mu sync.Mutex
	var got []leasehold.Return
	g := newGroup(b.rt)
	for _, h := range holders {
		g.Go(func() {
			rets, err := b.recall(ctx, h, by[h])
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return
			}
			mu.Lock()
			got = append(got, rets...)
			mu.Unlock()
		})
	}
	g.Wait()
	slices.SortFunc(got, func(x, y leasehold.Return) int { return cmp.Compare(x.ID, y.ID) })
	for _, r := range got {
		b.stats.Recalled.Add(1)
		b.settle(r)
	}
}

// exportLeases takes the book's leases of keys that match (a hand-off).
func (b *leases) exportLeases(match func(key string) bool) []outLease {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []outLease
	for c, m := range b.out {
		if !match(c.Key) {
			continue
		}
		for _, ol := range m {
			out = append(out, *ol)
			b.stats.HeldOut.Add(-ol.k)
		}
		delete(b.out, c)
	}
	slices.SortFunc(out, func(x, y outLease) int { return cmp.Compare(x.id, y.id) })
	return out
}

// importLeases adds leases another owner handed off with their counters'
// state. Their ends are ages from the export (ageUs: the export's clock
// reading minus now there), like every time that moves.
func (b *leases) importLeases(ls []outLease, exportedAt int64) {
	now := b.engine.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ol := range ls {
		d := now - exportedAt
		ol.end += d
		ol.res.Granted += d
		ol.res.End += d
		ol.rc.Shift(d)
		c := counterOf(ol.key, ol.limit)
		m := b.out[c]
		if m == nil {
			m = map[uint64]*outLease{}
			b.out[c] = m
		}
		m[ol.id] = &ol
		b.stats.HeldOut.Add(ol.k)
	}
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
