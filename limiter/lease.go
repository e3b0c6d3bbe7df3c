package limiter

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"
)

// LogReservation is k uses of a sliding log held out for a lease (see
// Memory.ReserveLog): one call of cost K recorded at End, so it stays in
// the log until End+Window.
type LogReservation struct {
	Key   string
	Limit Limit
	// ID is the reserved call's id in the log.
	ID uint64
	// K is the uses reserved.
	K int64
	// Granted and End bound the lease on the store's clock (µs): every use
	// made under it happened in [Granted, End].
	Granted, End int64
}

// ReserveLog holds k uses of a sliding-log counter out for a lease that
// ends length from now (at most the limit's window, so the state stays
// exportable; CheckState accepts a call up to one window ahead). The k
// uses are recorded as one call at the lease's end: from now until
// End+Window they count, so any use made under the lease, at any moment
// up to End, leaves the log no earlier than it would have had it been
// recorded when made. The outcome is the decision for k uses now; nothing
// is recorded when it is refused.
//
// id names the reserved call (a lease's id, so a return that reaches
// another owner after a hand-off or a crash still finds it); 0 lets the
// store pick one.
func (m *Memory) ReserveLog(ctx context.Context, key string, l Limit, k int64, length time.Duration, id uint64) (Outcome, LogReservation, error) {
	if l.Algorithm != SlidingLog {
		return Outcome{}, LogReservation{}, invalid("limit.algorithm", "only a sliding log is reserved at a lease's end")
	}
	if length <= 0 || length > l.Window {
		return Outcome{}, LogReservation{}, invalid("length", "must be more than 0 and at most the window %v, got %v", l.Window, length)
	}
	var res LogReservation
	out, err := m.takeForLease(ctx, key, l, k, Micros(length), func(s *shard, it *item, now, at int64, rc Receipt) {
		if id != 0 {
			st := s.logs[it.ck]
			for i := len(st.Uses) - 1; i >= 0; i-- {
				if st.Uses[i].ID == rc.ID {
					st.Uses[i].ID, rc.ID = id, id
					break
				}
			}
		}
		res = LogReservation{Key: key, Limit: l, ID: rc.ID, K: k, Granted: now, End: at}
	})
	return out, res, err
}

// takeForLease decides k uses of key under l now and, when they pass,
// records them as one call at now+ahead and runs then on it under the
// counter's lock: the shared part of ReserveLog and GrantBucket (a store
// at its key bound reclaims the expired counters once and decides again).
// Nothing is recorded when the decision refuses.
func (m *Memory) takeForLease(ctx context.Context, key string, l Limit, k, ahead int64, then func(s *shard, it *item, now, at int64, rc Receipt)) (Outcome, error) {
	if err := m.bounds.Check([]Entry{{Key: key, Limit: l, Cost: k}}); err != nil {
		return Outcome{}, err
	}
	if m.closed.Load() {
		return Outcome{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, err
	}
	items := []item{{ck: counterKey{key: key, window: Micros(l.Window)}, alg: l.Algorithm, limit: l, cost: k, shard: m.shardOf(key)}}
	for reclaimed := false; ; reclaimed = true {
		m.lock(items)
		now := m.clock.now()
		it := &items[0]
		s := &m.shards[it.shard]
		// peek applies a bucket's floor with the holds before this one.
		it.out = m.peek(s, it, now)
		if !it.out.Allowed {
			m.unlock(items)
			return it.out, nil
		}
		// record puts a sliding log's call in its place by time (a later
		// reservation may sit behind it).
		at := now + ahead
		rs, err := m.record(items, at, make([]Receipt, 0, 1))
		if err == nil {
			then(s, it, now, at, rs[0])
		}
		m.unlock(items)
		if err == errFull {
			if !reclaimed {
				m.budget.reclaim()
				continue
			}
			err = m.budget.fullError()
		}
		if err != nil {
			return Outcome{}, err
		}
		return it.out, nil
	}
}

// SettleLog replaces a lease's reservation with the uses made under it
// (their At on the store's clock, their IDs the holder's): a use is
// never put later than the reservation's end nor before its grant, so
// it counts at least as long as the use itself does. Uses that have
// already left the window are dropped. Settling a reservation the log no
// longer holds (it was lost with a crashed owner's unreplicated state)
// still records the uses. Settling twice does not count a use twice
// (uses are matched by id).
func (m *Memory) SettleLog(r LogReservation, uses []LogUse) {
	ck := counterKey{key: r.Key, window: Micros(r.Limit.Window)}
	s := &m.shards[m.shardOf(r.Key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.clock.now()
	st := s.logs[ck]
	if st == nil {
		if len(uses) == 0 {
			return
		}
		st = &LogState{}
		s.logs[m.own(ck)] = st
	}
	st.Remove(r.ID)
	in := make([]LogUse, 0, len(uses))
	for _, u := range uses {
		u.At = min(max(u.At, r.Granted), r.End)
		if u.Cost > 0 && satAdd(u.At, ck.window) > now {
			in = append(in, u)
		}
	}
	mergeLog(st, in)
	st.edits++
	st.Trim(now, ck.window)
	s.lower(logExpiry(st, ck.window))
}

// BucketHold is k tokens of a token bucket out on one lease (see
// Memory.GrantBucket). Expiry is when the hold ends on its own, nothing
// given back (µs on the store's clock; in a CounterState, relative to the
// export like every time).
type BucketHold struct {
	ID     uint64
	K      int64
	Expiry int64
}

// GrantBucket takes k tokens of a token bucket for a lease, as a consume
// of cost k would (the same burst check), and holds them: until the
// lease's return (ReturnBucket) or its expiry, the bucket never holds
// more than B - held, held being the tokens of every hold, so the tokens
// a holder still holds do not refill here and a holder spending them
// late finds no refill to add to. Every decision on the bucket starts
// from max(TAT, now + held*w/U) instead of max(TAT, now).
//
// id names the hold (a lease's id: the hold travels with the bucket's
// state to replicas and new owners, and a return that reaches them finds
// it); it must not be 0. expiry is when the hold ends without a return
// (the lease's end plus the slack for its return), on the store's clock:
// its k tokens then count as taken then, nothing given back. The outcome
// is the decision for k tokens now; nothing is held when it is refused.
func (m *Memory) GrantBucket(ctx context.Context, key string, l Limit, k int64, id uint64, expiry int64) (Outcome, error) {
	if l.Algorithm != TokenBucket {
		return Outcome{}, invalid("limit.algorithm", "only a token bucket holds tokens for a lease")
	}
	if id == 0 {
		return Outcome{}, invalid("id", "must not be 0")
	}
	return m.takeForLease(ctx, key, l, k, 0, func(s *shard, it *item, _, _ int64, _ Receipt) {
		if s.holds == nil {
			s.holds = map[counterKey][]BucketHold{}
		}
		ck := it.ck
		if _, ok := s.holds[ck]; !ok {
			ck.key = strings.Clone(ck.key)
		}
		s.holds[ck] = append(s.holds[ck], BucketHold{ID: id, K: k, Expiry: expiry})
		s.lower(expiry)
	})
}

// ReturnBucket ends the hold id of a token bucket whose holder used used
// of its k tokens: the floor first (with the holds before the return),
// then the hold goes and its k-used unused tokens come back (never more:
// used is read within [0, k]). A hold the bucket no longer has (it
// expired, or it never reached this store) gives nothing back: false.
// The used tokens count as taken at the return: they refill from now on.
func (m *Memory) ReturnBucket(key string, l Limit, id uint64, used int64) bool {
	ck := counterKey{key: key, window: Micros(l.Window)}
	s := &m.shards[m.shardOf(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.clock.now()
	held := m.heldAt(s, ck, now)
	hs := s.holds[ck]
	i := slices.IndexFunc(hs, func(h BucketHold) bool { return h.ID == id })
	if i < 0 {
		return false
	}
	h := hs[i]
	s.dropHold(ck, i)
	st := s.buckets[ck]
	if st == nil {
		return false
	}
	st.giveBack(now, l, held, h.K-min(max(used, 0), h.K))
	s.lower(bucketExpiry(st))
	return true
}

// BucketHeld reports the tokens of a token bucket out on leases now.
func (m *Memory) BucketHeld(key string, l Limit) int64 {
	ck := counterKey{key: key, window: Micros(l.Window)}
	s := &m.shards[m.shardOf(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	return m.heldAt(s, ck, m.clock.now())
}

// heldAt settles the holds of bucket ck that expired by now, in the
// order they expired: each applies the floor at its expiry with the held
// before it (written into the stored state), then leaves, giving nothing
// back. It returns the tokens still held. Callers hold s.mu.
func (m *Memory) heldAt(s *shard, ck counterKey, now int64) int64 {
	if len(s.holds) == 0 {
		return 0
	}
	hs := s.holds[ck]
	if len(hs) == 0 {
		return 0
	}
	var held int64
	for _, h := range hs {
		held += h.K
	}
	st := s.buckets[ck]
	for {
		i := -1
		for j, h := range hs {
			if h.Expiry <= now && (i < 0 || h.Expiry < hs[i].Expiry) {
				i = j
			}
		}
		if i < 0 {
			return held
		}
		if st != nil {
			st.floorAt(hs[i].Expiry, ck.window, held)
			s.lower(bucketExpiry(st))
		}
		held -= hs[i].K
		hs = s.dropHold(ck, i)
	}
}

// dropHold removes hold i of ck and returns the holds left.
func (s *shard) dropHold(ck counterKey, i int) []BucketHold {
	hs := slices.Delete(s.holds[ck], i, i+1)
	if len(hs) == 0 {
		delete(s.holds, ck)
		return nil
	}
	s.holds[ck] = hs
	return hs
}

// holdExpiry is the earliest expiry of ck's holds.
func (s *shard) holdExpiry(ck counterKey) int64 {
	e := int64(math.MaxInt64)
	for _, h := range s.holds[ck] {
		e = min(e, h.Expiry)
	}
	return e
}

// exportHolds returns ck's holds at now (expired ones settled first),
// their expiries made relative, and floors st, a copy to export, at now.
// Callers hold s.mu.
func (m *Memory) exportHolds(s *shard, ck counterKey, st *BucketState, now int64) []BucketHold {
	if len(s.holds) == 0 || len(s.holds[ck]) == 0 {
		return nil
	}
	held := m.heldAt(s, ck, now)
	if p := s.buckets[ck]; p != nil {
		*st = *p // as the holds that expired left it
	}
	if held == 0 {
		return nil
	}
	st.floorAt(now, ck.window, held)
	return slices.Clone(s.holds[ck])
}

// mergeHolds adds in's holds to ck's (times on m's clock): a hold by id
// once, the later expiry kept (a merge only holds more). Callers hold
// s.mu.
func (s *shard) mergeHolds(ck counterKey, in []BucketHold) {
	if len(in) == 0 {
		return
	}
	if s.holds == nil {
		s.holds = map[counterKey][]BucketHold{}
	}
	hs, had := s.holds[ck]
	for _, h := range in {
		if h.ID == 0 || h.K <= 0 {
			continue
		}
		if i := slices.IndexFunc(hs, func(x BucketHold) bool { return x.ID == h.ID }); i >= 0 {
			hs[i].Expiry = max(hs[i].Expiry, h.Expiry)
			hs[i].K = max(hs[i].K, h.K)
			continue
		}
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return
	}
	if !had {
		ck.key = strings.Clone(ck.key)
	}
	s.holds[ck] = hs
	s.lower(s.holdExpiry(ck))
}
