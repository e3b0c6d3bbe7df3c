package limiter_test

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/limiter"
)

// The fast Memory store against naive models: each model keeps the plain
// list of admitted calls of a key and recomputes every answer from the
// definition in DESIGN.md. They share no code with limiter.

type use struct {
	at, cost int64
	id       int
}

// model answers for one key: whether cost passes at now, the uses left,
// the exact µs at which it would pass (when refused; assuming no further
// calls) and the reset instant (when allowed).
type model interface {
	decide(now, cost int64) (allowed bool, remaining, passAt, reset int64)
	record(now, cost int64, id int)
	release(now int64, id int) // only for the log and window models
	// exceeded reports whether more than the limit is counted at now
	// (debits can pass it); whole is when the key is whole again, as
	// things stand.
	exceeded(now int64) bool
	whole(now int64) int64
}

// ---- sliding log: sum of the costs made in (now-w, now] ----

type logModel struct {
	uses, w int64
	calls   []use
}

func (m *logModel) inWindow(now int64) (total int64) {
	for _, c := range m.calls {
		if now < c.at+m.w {
			total += c.cost
		}
	}
	return total
}

func (m *logModel) decide(now, cost int64) (bool, int64, int64, int64) {
	total := m.inWindow(now)
	if total+cost <= m.uses {
		return true, m.uses - total - cost, 0, now + m.w
	}
	// The first instant at which enough calls have left: some call's exit.
	passAt := int64(-1)
	for _, c := range m.calls {
		if t := c.at + m.w; t > now && m.inWindow(t)+cost <= m.uses && (passAt < 0 || t < passAt) {
			passAt = t
		}
	}
	return false, max(m.uses-total, 0), passAt, 0
}

func (m *logModel) record(now, cost int64, id int) { m.calls = append(m.calls, use{now, cost, id}) }

func (m *logModel) exceeded(now int64) bool { return m.inWindow(now) > m.uses }

func (m *logModel) whole(now int64) int64 {
	last := now
	for _, c := range m.calls {
		if now < c.at+m.w {
			last = max(last, c.at+m.w)
		}
	}
	return last
}

func (m *logModel) release(_ int64, id int) {
	m.calls = slices.DeleteFunc(m.calls, func(c use) bool { return c.id == id })
}

// ---- sliding window: fixed windows aligned to multiples of w ----

type windowModel struct {
	uses, w int64
	calls   []use
}

func (m *windowModel) sum(from, to int64) (n int64) {
	for _, c := range m.calls {
		if c.at >= from && c.at < to {
			n += c.cost
		}
	}
	return n
}

// used returns Curr + ceil(Prev*(w-e)/w) at t, with exact integers.
func (m *windowModel) used(t int64) int64 {
	start := t - t%m.w
	curr, prev := m.sum(start, start+m.w), m.sum(start-m.w, start)
	e := t - start
	return curr + (prev*(m.w-e)+m.w-1)/m.w
}

func (m *windowModel) decide(now, cost int64) (bool, int64, int64, int64) {
	used := m.used(now)
	if used+cost <= m.uses {
		return true, m.uses - used - cost, 0, now - now%m.w + 2*m.w
	}
	// used(t) never grows without calls: binary search the first pass.
	lo, hi := now, now+2*m.w // fails at lo; passes at hi (both windows gone)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if m.used(mid)+cost <= m.uses {
			hi = mid
		} else {
			lo = mid
		}
	}
	return false, max(m.uses-used, 0), hi, 0
}

func (m *windowModel) record(now, cost int64, id int) { m.calls = append(m.calls, use{now, cost, id}) }

func (m *windowModel) exceeded(now int64) bool { return m.used(now) > m.uses }

func (m *windowModel) whole(now int64) int64 {
	start := now - now%m.w
	switch {
	case m.sum(start, start+m.w) > 0:
		return start + 2*m.w
	case m.sum(start-m.w, start) > 0:
		return start + m.w
	}
	return start
}

func (m *windowModel) release(_ int64, id int) {
	m.calls = slices.DeleteFunc(m.calls, func(c use) bool { return c.id == id })
}

// ---- token bucket: a real bucket of rational tokens, burst tokens when
// full, refilled at uses per w; debits may take it below zero ----

type bucketModel struct {
	uses, w int64
	burst   int64    // capacity
	tokens  *big.Rat // at last
	last    int64
}

func (m *bucketModel) at(now int64) *big.Rat {
	if m.tokens == nil {
		return big.NewRat(m.burst, 1)
	}
	t := new(big.Rat).Add(m.tokens, big.NewRat((now-m.last)*m.uses, m.w))
	if t.Cmp(big.NewRat(m.burst, 1)) > 0 {
		t.SetInt64(m.burst)
	}
	return t
}

func (m *bucketModel) exceeded(now int64) bool { return m.at(now).Sign() < 0 }

func (m *bucketModel) whole(now int64) int64 {
	missing := new(big.Rat).Sub(big.NewRat(m.burst, 1), m.at(now))
	return now + ceilRat(new(big.Rat).Mul(missing, big.NewRat(m.w, m.uses)))
}

func floorRat(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom()) // truncates; r >= 0 here
	return q.Int64()
}

func ceilRat(r *big.Rat) int64 {
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func (m *bucketModel) decide(now, cost int64) (bool, int64, int64, int64) {
	t := m.at(now)
	c := big.NewRat(cost, 1)
	if t.Cmp(c) >= 0 {
		after := new(big.Rat).Sub(t, c)
		// Full again once the missing tokens refill: (B-after)*w/U.
		missing := new(big.Rat).Sub(big.NewRat(m.burst, 1), after)
		refill := new(big.Rat).Mul(missing, big.NewRat(m.w, m.uses))
		return true, floorRat(after), 0, now + ceilRat(refill)
	}
	short := new(big.Rat).Sub(c, t)
	wait := ceilRat(new(big.Rat).Mul(short, big.NewRat(m.w, m.uses)))
	return false, max(floorRat(t), 0), now + wait, 0
}

func (m *bucketModel) record(now, cost int64, _ int) {
	m.tokens = new(big.Rat).Sub(m.at(now), big.NewRat(cost, 1))
	m.last = now
}

func (m *bucketModel) release(int64, int) { panic("no releases in the bucket model") }

func newModel(l limiter.Limit) model {
	w := limiter.Micros(l.Window)
	switch l.Algorithm {
	case limiter.SlidingLog:
		return &logModel{uses: l.Uses, w: w}
	case limiter.SlidingWindow:
		return &windowModel{uses: l.Uses, w: w}
	}
	return &bucketModel{uses: l.Uses, w: w, burst: l.Capacity()}
}

// modelDebit is what a store reports for a debit of cost at now, from
// the definition: allowed unless the key was already over its limit;
// recorded either way; the uses left after it (at least 0); when
// refused, the wait for one more use, counting the debit; when allowed,
// when the key is whole again. It records the debit in m.
func modelDebit(m model, now, cost int64, id int) limiter.Verdict {
	over := m.exceeded(now)
	m.record(now, cost, id)
	ok, remaining, passAt, _ := m.decide(now, 1)
	if ok {
		remaining++ // decide took the one use it was asked about
	}
	v := limiter.Verdict{Allowed: !over, Remaining: max(remaining, 0)}
	if !over {
		v.ResetAt = time.UnixMicro(m.whole(now))
		return v
	}
	at := (passAt + 999) / 1000 * 1000
	v.RetryAt = time.UnixMicro(at)
	v.RetryAfter = time.Duration(at-now) * time.Microsecond
	return v
}

// modelVerdict is what a store reports for the model's answer.
func modelVerdict(m model, now, cost int64) limiter.Verdict {
	allowed, remaining, passAt, reset := m.decide(now, cost)
	v := limiter.Verdict{Allowed: allowed, Remaining: remaining}
	if allowed {
		v.ResetAt = time.UnixMicro(reset)
		return v
	}
	at := (passAt + 999) / 1000 * 1000
	v.RetryAt = time.UnixMicro(at)
	v.RetryAfter = time.Duration(at-now) * time.Microsecond
	return v
}

func sameVerdict(a, b limiter.Verdict) bool {
	return a.Allowed == b.Allowed && a.Remaining == b.Remaining && a.RetryAfter == b.RetryAfter &&
		a.RetryAt.Equal(b.RetryAt) && a.ResetAt.Equal(b.ResetAt)
}

var propertyKeys = []string{"a", "b", "c"}

func TestMemoryAgainstModels(t *testing.T) {
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) { checkAgainstModel(rt, alg) })
		})
	}
}

func checkAgainstModel(rt *rapid.T, alg limiter.Algorithm) {
	clock := limiter.NewFakeClock(t0)
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1, Shards: 2})
	defer m.Close()
	limits := map[string]limiter.Limit{}
	models := map[string]model{}
	admitted := map[string][]use{}
	for _, k := range propertyKeys {
		l := limiter.Limit{
			Algorithm: alg,
			Uses:      rapid.Int64Range(1, 6).Draw(rt, "uses "+k),
			Window:    time.Duration(rapid.IntRange(1, 10).Draw(rt, "window ms "+k)) * time.Millisecond,
		}
		if alg == limiter.TokenBucket {
			l.Burst = rapid.Int64Range(0, 10).Draw(rt, "burst "+k) // 0: Uses
		}
		limits[k], models[k] = l, newModel(l)
	}
	type granted struct {
		key string
		id  int
		v   limiter.Verdict
	}
	var releasable []granted
	ctx := limiter.WithRelease(context.Background())
	now := t0.UnixMicro()
	steps := rapid.IntRange(1, 80).Draw(rt, "steps")
	for i := range steps {
		k := rapid.SampledFrom(propertyKeys).Draw(rt, "key")
		l := limits[k]
		switch op := rapid.IntRange(0, 9).Draw(rt, "op"); {
		case op < 3: // time passes: often a little, sometimes past everything
			d := rapid.OneOf(rapid.Int64Range(0, 3), rapid.Int64Range(0, 3000), rapid.Int64Range(0, 25000)).Draw(rt, "µs")
			clock.Advance(time.Duration(d) * time.Microsecond)
			now += d
		case op == 3 && alg != limiter.TokenBucket && len(releasable) > 0:
			j := rapid.IntRange(0, len(releasable)-1).Draw(rt, "release")
			g := releasable[j]
			if err := g.v.Release(context.Background()); err != nil {
				rt.Fatalf("step %d: Release: %v", i, err)
			}
			models[g.key].release(now, g.id)
			admitted[g.key] = slices.DeleteFunc(admitted[g.key], func(u use) bool { return u.id == g.id })
		case op == 4: // a debit: counted whatever, up to three times the capacity
			cost := rapid.Int64Range(1, 3*l.Capacity()).Draw(rt, "debit")
			e := []limiter.Entry{{Key: k, Limit: l, Cost: cost, Debit: true}}
			p, err := m.PeekMany(context.Background(), e)
			if err != nil {
				rt.Fatal(err)
			}
			v, err := m.ConsumeMany(ctx, e)
			if err != nil {
				rt.Fatal(err)
			}
			want := modelDebit(models[k], now, cost, i)
			if !sameVerdict(p, want) || !sameVerdict(v, want) {
				rt.Fatalf("step %d at +%dµs: debit(%q %v cost %d): Peek %s, Consume %s, model says %s", i, now-t0.UnixMicro(), k, l, cost, show(p), show(v), show(want))
			}
			if v.Release != nil {
				rt.Fatalf("step %d: a debit carries a Release", i)
			}
		default:
			cost := rapid.Int64Range(1, l.Capacity()).Draw(rt, "cost")
			e := []limiter.Entry{{Key: k, Limit: l, Cost: cost}}
			want := modelVerdict(models[k], now, cost)
			p, err := m.PeekMany(context.Background(), e)
			if err != nil {
				rt.Fatal(err)
			}
			if !sameVerdict(p, want) {
				rt.Fatalf("step %d at +%dµs: Peek(%q %v cost %d) = %s, model says %s", i, now-t0.UnixMicro(), k, l, cost, show(p), show(want))
			}
			v, err := m.ConsumeMany(ctx, e)
			if err != nil {
				rt.Fatal(err)
			}
			if !sameVerdict(v, want) {
				rt.Fatalf("step %d: Consume(%q %v cost %d) = %s, model (and Peek) say %s", i, k, l, cost, show(v), show(want))
			}
			if v.Allowed {
				models[k].record(now, cost, i)
				admitted[k] = append(admitted[k], use{now, cost, i})
				releasable = append(releasable, granted{k, i, v})
			}
		}
	}
	for _, k := range propertyKeys {
		checkAdmissionBound(rt, limits[k], admitted[k])
	}
}

// checkAdmissionBound checks the admitted calls of one key against the
// bound each algorithm promises over any stretch of time:
//   - sliding log: at most Uses in any window [t, t+w);
//   - sliding window: at most Uses in each aligned window, and at most
//     2*Uses-1 in any window [t, t+w) (it straddles two aligned ones, and
//     the earlier one's weight is at least 1/w of it);
//   - token bucket: at most Burst + floor(d*Uses/w) in any stretch [a, a+d]
//     (a full bucket plus what refills meanwhile).
func checkAdmissionBound(rt *rapid.T, l limiter.Limit, calls []use) {
	w, n := limiter.Micros(l.Window), l.Uses
	for i := range calls {
		var sum int64
		for j := i; j < len(calls); j++ {
			sum += calls[j].cost
			d := calls[j].at - calls[i].at
			var bound int64
			switch l.Algorithm {
			case limiter.SlidingLog:
				bound = 1<<62 - 1
				if d < w {
					bound = n
				}
			case limiter.SlidingWindow:
				bound = 1<<62 - 1
				if d < w {
					bound = 2*n - 1
					if calls[i].at/w == calls[j].at/w {
						bound = n
					}
				}
			default:
				bound = l.Capacity() + d*n/w
			}
			if sum > bound {
				rt.Fatalf("%v admitted %d uses from +%dµs to +%dµs (%dµs), more than the bound %d", l, sum, calls[i].at, calls[j].at, d, bound)
			}
		}
	}
}

func show(v limiter.Verdict) string {
	rel := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.Sub(t0).Microseconds()
	}
	return fmt.Sprintf("{Allowed:%v Remaining:%d RetryAfter:%v RetryAt:+%dµs ResetAt:+%dµs}",
		v.Allowed, v.Remaining, v.RetryAfter, rel(v.RetryAt), rel(v.ResetAt))
}
