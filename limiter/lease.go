package limiter

import (
	"context"
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
	entries := []Entry{{Key: key, Limit: l, Cost: k}}
	if err := m.bounds.Check(entries); err != nil {
		return Outcome{}, LogReservation{}, err
	}
	if length <= 0 || length > l.Window {
		return Outcome{}, LogReservation{}, invalid("length", "must be more than 0 and at most the window %v, got %v", l.Window, length)
	}
	if m.closed.Load() {
		return Outcome{}, LogReservation{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, LogReservation{}, err
	}
	items := []item{{ck: counterKey{key: key, window: Micros(l.Window)}, alg: SlidingLog, limit: l, cost: k, shard: m.shardOf(key)}}
	for reclaimed := false; ; reclaimed = true {
		m.lock(items)
		now := m.clock.now()
		it := &items[0]
		it.out = m.peek(&m.shards[it.shard], it, now)
		if !it.out.Allowed {
			m.unlock(items)
			return it.out, LogReservation{}, nil
		}
		end := now + Micros(length)
		// Record puts the call in its place by time (a later reservation
		// may sit behind it).
		rs, err := m.record(items, end, make([]Receipt, 0, 1))
		if err == nil && id != 0 {
			st := m.shards[it.shard].logs[it.ck]
			for i := len(st.Uses) - 1; i >= 0; i-- {
				if st.Uses[i].ID == rs[0].ID {
					st.Uses[i].ID, rs[0].ID = id, id
					break
				}
			}
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
			return Outcome{}, LogReservation{}, err
		}
		return it.out, LogReservation{Key: key, Limit: l, ID: rs[0].ID, K: k, Granted: now, End: end}, nil
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
