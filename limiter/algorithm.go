package limiter

import (
	"math"
	"time"
)

// Three of the algorithms as pure functions of (state, now, limit, cost)
// (the fourth, the fixed window, is in fixed.go).
// Times are microseconds on the store's clock (Unix µs for the stores of
// this project; any origin works as long as it is >= 0 and one clock is
// used per key). Windows are whole milliseconds, so whole microseconds.
// Adapters (Lua, SQL) implement the same arithmetic and are tested on the
// same vectors (vectors_test.go).

// Outcome is one counter's answer.
type Outcome struct {
	// Allowed is true when the counter can take the cost.
	Allowed bool
	// Remaining is the uses left after the call (after recording it when
	// allowed; as things stand when refused).
	Remaining int64
	// Wait is, when refused, how long until the cost would pass (µs).
	Wait int64
	// Reset is when the counter is whole again (µs, same clock as now),
	// counting this call when allowed.
	Reset int64
}

// Micros returns d in whole microseconds.
func Micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// MicrosDuration converts µs to a Duration, saturating instead of
// overflowing (a 292-year window's wait is in range in µs, not in ns).
func MicrosDuration(us int64) time.Duration {
	if us > math.MaxInt64/1000 {
		return time.Duration(math.MaxInt64)
	}
	if us < math.MinInt64/1000 {
		return time.Duration(math.MinInt64)
	}
	return time.Duration(us) * time.Microsecond
}

func clampInt(x uint64) int64 {
	if x > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(x)
}

// satAdd adds without overflowing int64.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// ---- sliding log ----

// LogUse is one recorded call of a sliding log.
type LogUse struct {
	At   int64  // when it was recorded (µs)
	Cost int64  // uses it took
	ID   uint64 // unique per call, so a release or a merge finds exactly it
}

// LogState is a sliding log: the calls still in the window, oldest first,
// and the sum of their costs.
type LogState struct {
	// Uses are the calls still in the window, oldest first.
	Uses []LogUse
	// Total is the sum of the costs in Uses.
	Total int64
	// edits counts the changes to the log other than appending a call
	// and calls leaving the window (a release, a merge, a replacement): a
	// replica that holds the log up to a call (a LogMark) can be sent just
	// the calls after it only while edits is what it was then.
	edits uint32
	// shippedEdits and shipped are the replication cursor
	// (Memory.AppendExportShipped): the log's replicas hold it up to the
	// call with ID shipped, as it was after shippedEdits edits; shipped 0:
	// they may hold nothing. Kept here rather than in a map beside the
	// store, so that shipping a counter costs no second lookup.
	shippedEdits uint32
	shipped      uint64
}

// Trim drops the calls that left the window ending at now. A call made at
// t is in the window while now < t+w.
func (s *LogState) Trim(now, w int64) {
	k := 0
	for k < len(s.Uses) && satAdd(s.Uses[k].At, w) <= now {
		s.Total -= s.Uses[k].Cost
		k++
	}
	if k == len(s.Uses) {
		s.Uses = s.Uses[:0]
		s.Total = 0
		return
	}
	s.Uses = s.Uses[k:]
}

// Decide answers whether cost more uses fit at now; it only trims.
func (s *LogState) Decide(now int64, l Limit, cost int64) Outcome {
	w := Micros(l.Window)
	s.Trim(now, w)
	if s.Total+cost <= l.Uses {
		reset := satAdd(now, w)
		return Outcome{Allowed: true, Remaining: l.Uses - s.Total - cost, Reset: reset}
	}
	// Wait until enough of the oldest calls have left.
	need := s.Total + cost - l.Uses
	var wait int64
	for _, use := range s.Uses {
		need -= use.Cost
		if need <= 0 {
			wait = satAdd(use.At, w) - now
			break
		}
	}
	return Outcome{Remaining: max(l.Uses-s.Total, 0), Wait: wait, Reset: s.reset(now, w)}
}

// DecideDebit answers a debit of cost at now (Entry.Debit); it only
// trims, and the caller records the debit with Record whatever the
// outcome. Allowed reports that the log did not already hold more than
// Uses; Remaining is what is left after the debit (at least 0). When
// refused, Wait is how long until a call of one use passes, counting the
// debit: the oldest calls must leave until Total+cost+1 <= Uses, and when
// that takes the debit itself, a whole window. Reset counts the debit.
func (s *LogState) DecideDebit(now int64, l Limit, cost int64) Outcome {
	w := Micros(l.Window)
	s.Trim(now, w)
	after := satAdd(s.Total, cost)
	o := Outcome{Allowed: s.Total <= l.Uses, Remaining: max(l.Uses-after, 0), Reset: satAdd(now, w)}
	if o.Allowed {
		return o
	}
	o.Wait = w
	need := after + 1 - l.Uses
	for _, use := range s.Uses {
		need -= use.Cost
		if need <= 0 {
			o.Wait = max(satAdd(use.At, w)-now, 1)
			break
		}
	}
	return o
}

func (s *LogState) reset(now, w int64) int64 {
	if len(s.Uses) == 0 {
		return now
	}
	return satAdd(s.Uses[len(s.Uses)-1].At, w)
}

// Record appends a call; callers decided first. A lease's reservation
// (Memory.ReserveLog) may sit ahead of now: the call goes before it, so
// the log stays oldest first, and the change counts as an edit (a
// replica's delta, which takes only calls after its last one, would miss
// it).
func (s *LogState) Record(now, cost int64, id uint64) {
	s.Total += cost
	n := len(s.Uses)
	if n == 0 || s.Uses[n-1].At <= now {
		s.Uses = append(s.Uses, LogUse{At: now, Cost: cost, ID: id})
		return
	}
	i := n
	for i > 0 && s.Uses[i-1].At > now {
		i--
	}
	s.Uses = append(s.Uses, LogUse{})
	copy(s.Uses[i+1:], s.Uses[i:])
	s.Uses[i] = LogUse{At: now, Cost: cost, ID: id}
	s.edits++
}

// Remove gives back the call with id, if it is still in the log.
func (s *LogState) Remove(id uint64) bool {
	for i := len(s.Uses) - 1; i >= 0; i-- {
		if s.Uses[i].ID == id {
			s.Total -= s.Uses[i].Cost
			s.Uses = append(s.Uses[:i], s.Uses[i+1:]...)
			s.edits++ // a replica must see the use go: its next export is whole
			return true
		}
	}
	return false
}

// ---- sliding window ----

// WindowState is two fixed-window counters: Curr counts the window that
// started at Start, Prev the one before it.
type WindowState struct {
	// Start is when the current fixed window began (µs), a multiple of
	// the window on the store's clock unless the state was handed over.
	Start int64
	// Curr is the uses counted in [Start, Start+w).
	Curr int64
	// Prev is the uses counted in [Start-w, Start).
	Prev int64
}

// Advance rolls the windows forward to the one holding now. Empty
// counters re-align to a multiple of w on the store's clock.
func (s *WindowState) Advance(now, w int64) {
	if s.Curr == 0 && s.Prev == 0 {
		s.Start = now - ((now%w)+w)%w
		return
	}
	if now < s.Start {
		return // a merged state from a clock ahead of ours: keep it
	}
	switch n := (now - s.Start) / w; {
	case n == 0:
	case n == 1:
		s.Prev, s.Curr, s.Start = s.Curr, 0, s.Start+w
	default:
		s.Prev, s.Curr = 0, 0
		s.Start = now - ((now%w)+w)%w
	}
}

// weighted returns ceil(Prev*(w-e)/w): the previous window's share still
// inside the sliding window, rounded up so a refusal never turns on a
// rounding.
func (s *WindowState) weighted(e, w int64) int64 {
	return clampInt(mul(u(s.Prev), u(w-e)).divCeil(u(w)))
}

// Decide answers whether cost more uses fit at now; it only advances.
func (s *WindowState) Decide(now int64, l Limit, cost int64) Outcome {
	w := Micros(l.Window)
	s.Advance(now, w)
	e := max(now-s.Start, 0)
	used := s.Curr + s.weighted(e, w)
	if used+cost <= l.Uses {
		reset := satAdd(s.Start, 2*w) // this call rolls out of the previous window
		if w > math.MaxInt64/2 {
			reset = math.MaxInt64
		}
		return Outcome{Allowed: true, Remaining: l.Uses - used - cost, Reset: reset}
	}
	var at int64
	if s.Curr+cost <= l.Uses {
		// The previous window must decay: Prev*(w-e') <= K*w.
		k := l.Uses - s.Curr - cost
		at = satAdd(s.Start, w-clampInt(mul(u(k), u(w)).divmodQ(u(s.Prev))))
	} else {
		// Only after this window has become the previous one.
		at = satAdd(satAdd(s.Start, w), w-clampInt(mul(u(l.Uses-cost), u(w)).divmodQ(u(s.Curr))))
	}
	return Outcome{Remaining: max(l.Uses-used, 0), Wait: max(at-now, 1), Reset: s.reset(w)}
}

// DecideDebit answers a debit of cost at now (Entry.Debit); it only
// advances, and the caller records the debit with Record whatever the
// outcome. Allowed reports that the weighted count did not already pass
// Uses; Remaining is what is left after the debit (at least 0). When
// refused, Wait is how long until a call of one use passes, counting the
// debit (at most two windows: the counters forget everything by then).
func (s *WindowState) DecideDebit(now int64, l Limit, cost int64) Outcome {
	w := Micros(l.Window)
	s.Advance(now, w)
	e := max(now-s.Start, 0)
	used := satAdd(s.Curr, s.weighted(e, w))
	after := *s
	after.Curr = satAdd(after.Curr, cost)
	o := Outcome{Allowed: used <= l.Uses, Remaining: max(l.Uses-satAdd(used, cost), 0), Reset: after.reset(w)}
	if !o.Allowed {
		// used > Uses, so after the debit one more use cannot pass now.
		one := after.Decide(now, l, 1)
		o.Wait = one.Wait
	}
	return o
}

func (s *WindowState) reset(w int64) int64 {
	switch {
	case s.Curr > 0:
		return satAdd(s.Start, 2*w)
	case s.Prev > 0:
		return satAdd(s.Start, w)
	}
	return s.Start
}

// Record counts a call; callers decided first.
func (s *WindowState) Record(cost int64) { s.Curr = satAdd(s.Curr, cost) }

// Remove gives back cost uses counted in the window that started at start.
// The window is matched to the nearest start, so a receipt whose times
// crossed a network (and are off by the transit time) still finds it.
func (s *WindowState) Remove(now, w, start, cost int64) bool {
	s.Advance(now, w)
	switch d := start - s.Start; {
	case d > -w/2 && d < w/2:
		s.Curr = max(s.Curr-cost, 0)
	case d > -w-w/2 && d <= -w/2:
		s.Prev = max(s.Prev-cost, 0)
	default:
		return false
	}
	return true
}

func (x u128) divmodQ(d uint64) uint64 {
	q, _ := x.divmod(d)
	return q
}

// ---- token bucket (GCRA) ----

// BucketState is GCRA's theoretical arrival time, kept exact as
// TAT + Rem/Uses microseconds (Uses is the limit Rem was written under).
type BucketState struct {
	// TAT is the whole µs of the theoretical arrival time: the bucket is
	// full again from TAT + Rem/Uses on.
	TAT int64
	// Rem is the fraction of a µs beyond TAT, in units of 1/Uses µs.
	Rem int64
	// Uses is the limit's Uses when the state was written (0: never).
	Uses int64
}

// scaled returns Uses*TAT + Rem in units of 1/uses µs, rescaling Rem when
// the limit's uses changed since it was written.
func (s *BucketState) scaled(uses int64) u128 {
	rem := s.Rem
	if s.Uses != uses && s.Uses > 0 {
		rem = clampInt(mul(u(s.Rem), u(uses)).divmodQ(u(s.Uses)))
	}
	return mul(u(s.TAT), u(uses)).add(u128of(rem))
}

func (s *BucketState) set(x u128, uses int64) {
	q, r := x.divmod(u(uses))
	s.TAT, s.Rem, s.Uses = clampInt(q), int64(r), uses
}

// Decide answers whether cost more uses fit at now; it changes nothing.
// A bucket of capacity B (Limit.Burst, default U) refilled at U per w:
// each use pushes the arrival time w/U further; a call passes while that
// stays within B*w/U of now.
func (s *BucketState) Decide(now int64, l Limit, cost int64) Outcome {
	c := *s
	return c.decide(now, l, cost, 0)
}

// base is the arrival time a decision at now starts from (in units of
// 1/U µs, with now's): max(TAT, now + held*w/U). held is the tokens out on
// leases of this bucket (see Memory.GrantBucket): the bucket never holds
// more than B - held, so tokens a holder still holds do not refill here
// (with held 0 it is plain GCRA's max(TAT, now)).
func (s *BucketState) base(now int64, l Limit, held int64) (x, nowX u128) {
	U := l.Uses
	nowX = mul(u(now), u(U))
	x = s.scaled(U)
	floor := nowX
	if held > 0 {
		floor = nowX.add(mul(u(held), u(Micros(l.Window))))
	}
	if x.cmp(floor) < 0 {
		x = floor
	}
	return x, nowX
}

// decide is Decide that, when the call passes, also records it in s, as
// Record would: Memory's hot path, one pass of the arithmetic, not two.
// held is the tokens out on leases (see base).
func (s *BucketState) decide(now int64, l Limit, cost, held int64) Outcome {
	U, w := l.Uses, Micros(l.Window)
	x, nowX := s.base(now, l, held)
	debt := x.sub(nowX) // U * (TAT - now)
	B := l.Capacity()
	capacity := mul(u(B), u(w))
	step := mul(u(cost), u(w))
	if after := debt.add(step); after.cmp(capacity) <= 0 {
		s.set(x.add(step), U)
		reset := s.TAT // the new arrival time, rounded up
		if s.Rem > 0 && reset < math.MaxInt64 {
			reset++
		}
		return Outcome{
			Allowed:   true,
			Remaining: B - clampInt(after.divCeil(u(w))),
			Reset:     reset,
		}
	}
	over := debt.add(step).sub(capacity)
	return Outcome{
		Remaining: max(B-clampInt(debt.divCeil(u(w))), 0),
		Wait:      max(clampInt(over.divCeil(u(U))), 1),
		Reset:     clampInt(x.divCeil(u(U))),
	}
}

// DecideDebit answers a debit of cost at now (Entry.Debit); it changes
// nothing, and the caller records the debit with Record whatever the
// outcome (the bucket may go below zero). Allowed reports that the
// bucket was not already below zero; Remaining is what is left after the
// debit (at least 0). When refused, Wait is how long until a call of one
// use passes, counting the debit. Reset is when the bucket is full again
// after it.
func (s *BucketState) DecideDebit(now int64, l Limit, cost int64) Outcome {
	c := *s
	return c.decideDebit(now, l, cost, 0)
}

// decideDebit is DecideDebit that also records the debit in s; held is
// the tokens out on leases (see base).
func (s *BucketState) decideDebit(now int64, l Limit, cost, held int64) Outcome {
	U, w, B := l.Uses, Micros(l.Window), l.Capacity()
	x, nowX := s.base(now, l, held)
	capacity := mul(u(B), u(w))
	o := Outcome{Allowed: x.sub(nowX).cmp(capacity) <= 0}
	x = x.add(mul(u(cost), u(w))) // < 2^127: U*TAT < 2^126, cost*w < 2^126
	s.set(x, U)
	debt := x.sub(nowX)
	o.Remaining = max(B-clampInt(debt.divCeil(u(w))), 0)
	o.Reset = clampInt(x.divCeil(u(U)))
	if !o.Allowed {
		over := debt.add(u128of(w)).sub(capacity) // debt > capacity: positive
		o.Wait = max(clampInt(over.divCeil(u(U))), 1)
	}
	return o
}

// Record takes cost uses at now; callers decided first.
func (s *BucketState) Record(now int64, l Limit, cost int64) {
	U := l.Uses
	nowX := mul(u(now), u(U))
	x := s.scaled(U)
	if x.cmp(nowX) < 0 {
		x = nowX
	}
	s.set(x.add(mul(u(cost), u(Micros(l.Window)))), U)
}

// receiptAfter is the After of a receipt for a call just recorded in s
// (µs, rounded up) while held tokens were out on leases of the bucket:
// where the call's tokens end, the arrival time it left less held*w/U.
// The held tokens are in the arrival time (a grant takes them as a
// consume would) but never refill while held (the floor now +
// held*w/U): all the refill goes to the calls' tokens, in the order they
// were recorded, and the held ones sit at the end of the timeline, past
// every call's. There a call's tokens stay however the holds change: a
// grant adds to the held tokens at the end; a return takes its k from
// there and puts its used ones back as taken at the return, after every
// call recorded so far; an expiry does so with all k. So a call recorded
// while holds were out ends held*w/U before the arrival time it left,
// while those holds are out and after. Read as the arrival time, its
// After gave back up to held tokens of what was recorded after it (the
// owner's lease test found that: a lease's tokens spent and returned, a
// direct call recorded while it was out, whose tokens had refilled,
// released whole, and one use more than the bucket's capacity).
func (s *BucketState) receiptAfter(l Limit, held int64) int64 {
	x := s.scaled(l.Uses)
	if held > 0 {
		x = x.sub(mul(u(held), u(Micros(l.Window))))
	}
	return clampInt(x.divCeil(u(l.Uses)))
}

// Remove gives back a call that took cost uses and left the arrival time
// at after (µs, rounded up). Only the part of its debt still outstanding
// at now comes back, so a release never frees a later call's uses, as
// long as after is where the call's tokens end now: a release since the
// call was recorded may have moved them down, and tokens out on leases
// as it was recorded end the timeline past them (see BucketMoves,
// receiptAfter and Release, which account for that).
func (s *BucketState) Remove(now int64, l Limit, cost, after int64) bool {
	return s.remove(now, l, cost, after, 0)
}

// remove is Remove with held tokens out on leases: the bucket never comes
// back above B - held (the arrival time stays at or past now + held*w/U).
func (s *BucketState) remove(now int64, l Limit, cost, after, held int64) bool {
	U := l.Uses
	if after <= now {
		return false
	}
	back := mul(u(cost), u(Micros(l.Window)))
	if left := mul(u(after-now), u(U)); left.cmp(back) < 0 {
		back = left
	}
	_, floor := s.base(now, l, 0)
	if held > 0 {
		floor = floor.add(mul(u(held), u(Micros(l.Window))))
	}
	x := s.scaled(U)
	if x.cmp(floor) <= 0 {
		return false
	}
	if x.sub(floor).cmp(back) < 0 {
		x = floor
	} else {
		x = x.sub(back)
	}
	s.set(x, U)
	return true
}

// floorAt applies the lease floor at instant at with held tokens out:
// TAT = max(TAT, at + held*w/U), under the state's own Uses. The floor
// holds lazily between events while held does not change; an event that
// changes held (a hold that expires, a grant, a return) applies it first
// with the held before the change.
func (s *BucketState) floorAt(at int64, w int64, held int64) {
	if s.Uses <= 0 || held <= 0 {
		return
	}
	f := mul(u(max(at, 0)), u(s.Uses)).add(mul(u(held), u(w)))
	if s.scaled(s.Uses).cmp(f) < 0 {
		s.set(f, s.Uses)
	}
}

// giveBack ends a hold of k tokens at now of which used were spent: the
// floor first, with held (this hold included), then the k-used unused
// tokens go back. The arrival time stays at or past now + (held-k)*w/U.
// It moves no call's tokens (see receiptAfter): the hold's k leave the
// end of the timeline and its used ones come back after every call
// recorded so far; no move is recorded (BucketMoves).
func (s *BucketState) giveBack(now int64, l Limit, held, unused int64) {
	x, _ := s.base(now, l, held)
	if unused > 0 {
		x = x.sub(mul(u(unused), u(Micros(l.Window))))
	}
	s.set(x, l.Uses)
}

// Empty reports whether the bucket is full again at now (its state can go).
func (s *BucketState) Empty(now int64) bool {
	return s.TAT < now || (s.TAT == now && s.Rem == 0)
}
