package owner

import (
	"fmt"
	"testing"
	"time"
)

// The hop rule as a step table: one call and one node's facts per row,
// the rule's answer checked whole. Each row names the part of the rule
// (package doc) it shows.
func TestHopRule(t *testing.T) {
	self := "b"
	plain := Call{}                               // made here (origin)
	first := Call{Hops: 1}                        // forwarded once
	second := Call{Hops: 2}                       // forwarded twice
	last := Call{Hops: maxHops}                   // the last hop
	final := Call{Final: true, Hops: maxHops + 1} // passed on as final
	finalFollowed := Call{Final: true, Hops: maxHops + 1}
	onwardOf := func(c Call) Call { return onward(c) }
	followed := Call{Final: true, Hops: maxHops + 1, Direct: true}
	for i, row := range []struct {
		rule   string
		c      Call
		origin bool
		f      hopFacts
		want   hopStep
	}{
		{"1: made here, owned elsewhere: to the owner", plain, true, hopFacts{Owner: "a"}, hopStep{Do: passOn, To: "a", Call: Call{}}},
		{"1: made here, owned here: counted", plain, true, hopFacts{Owner: self}, hopStep{Do: countHere}},
		{"1: owned here but given away: its first hop", plain, true, hopFacts{Owner: self, Given: true, GivenTo: "c"}, hopStep{Do: passOn, To: "c", Call: Call{Hops: 1}}},
		{"1: given to several nodes: moving", plain, true, hopFacts{Owner: self, Given: true}, hopStep{Do: moving}},
		{"2: forwarded, owned here: counted", first, false, hopFacts{Owner: self}, hopStep{Do: countHere}},
		{"2: forwarded, this ring's owner is another: one hop on", first, false, hopFacts{Owner: "c", OwnerKnown: true}, hopStep{Do: passOn, To: "c", Call: onwardOf(first)}},
		{"2: ...but its address is unknown here: counted", first, false, hopFacts{Owner: "c"}, hopStep{Do: countHere}},
		{"2: forwarded, given away: to where custody says", second, false, hopFacts{Owner: self, Given: true, GivenTo: "c"}, hopStep{Do: passOn, To: "c", Call: Call{Hops: maxHops, Direct: true}}},
		{"2: custody beats the ring", first, false, hopFacts{Owner: "a", OwnerKnown: true, Given: true, GivenTo: "c"}, hopStep{Do: passOn, To: "c", Call: onwardOf(first)}},
		{"2: given to several nodes: moving", first, false, hopFacts{Owner: self, Given: true}, hopStep{Do: moving}},
		{"4: a last hop owned here: counted", last, false, hopFacts{Owner: self}, hopStep{Do: countHere}},
		{"4: a last hop is not passed on by the ring", last, false, hopFacts{Owner: "c", OwnerKnown: true, Asked: true}, hopStep{Do: countHere}},
		{"4a: handed to the owner: the call follows, once", last, false, hopFacts{Owner: "c", Handed: true}, hopStep{Do: passOn, To: "c", Call: followed}},
		{"4a: ...never twice: moving, not counted from nothing", finalFollowed, false, hopFacts{Owner: "c", Handed: true, Asked: true}, hopStep{Do: moving}},
		{"4a: given away: a last hop follows the keys once", last, false, hopFacts{Owner: self, Given: true, GivenTo: "c"}, hopStep{Do: passOn, To: "c", Call: followed}},
		{"4a: ...held by another node: the same", last, false, hopFacts{Owner: "a", Given: true, GivenTo: "c"}, hopStep{Do: passOn, To: "c", Call: followed}},
		{"4a: ...never twice", finalFollowed, false, hopFacts{Owner: self, Given: true, GivenTo: "c"}, hopStep{Do: moving}},
		{"4a: given to several nodes: moving", last, false, hopFacts{Owner: self, Given: true}, hopStep{Do: moving}},
		{"4a: handed back since (not Handed): counted", last, false, hopFacts{Owner: self}, hopStep{Do: countHere}},
		{"4a: a hand-off under way is waited for", last, false, hopFacts{Owner: "c", Handing: true, Asked: true}, hopStep{Do: awaitHandOff}},
		{"4a: ...and followed once delivered", last, false, hopFacts{Owner: "c", Handed: true, Asked: true, Waited: true}, hopStep{Do: passOn, To: "c", Call: followed}},
		{"4a: ...or counted here when it failed", last, false, hopFacts{Owner: "c", Handing: true, Asked: true, Waited: true}, hopStep{Do: countHere}},
		{"4b: this ring disagrees: ask the sender first", last, false, hopFacts{Owner: "c"}, hopStep{Do: askSender}},
		{"3: forwarded, keys of several owners: split", first, false, hopFacts{}, hopStep{Do: split}},
		{"3: ...a last hop too", last, false, hopFacts{Asked: true}, hopStep{Do: split}},
		{"4b: the sender names a holder: there, as final", last, false, hopFacts{Owner: "c", Asked: true, Holder: "d"}, hopStep{Do: passOn, To: "d", Call: followed}},
		{"4b: a final call is not sent to a holder", final, false, hopFacts{Owner: "c", Asked: true, Holder: "d"}, hopStep{Do: countHere}},
		{"4b: no holder named: counted here", last, false, hopFacts{Owner: "c", Asked: true}, hopStep{Do: countHere}},
	} {
		row.f.Self = self
		got := hopRule(row.c, row.origin, row.f)
		if fmt.Sprint(got) != fmt.Sprint(row.want) {
			t.Errorf("step %d (%s): hopRule(%+v, origin %v, %+v) = %+v, want %+v", i+1, row.rule, row.c, row.origin, row.f, got, row.want)
		}
	}
}

// A call passed on by the rule never exceeds maxHops+1 forwards: follow
// every passOn from a call made here, each node knowing the worst (its
// ring names another owner, custody another node, a holder, a hand-off).
func TestHopRuleBounded(t *testing.T) {
	worst := hopFacts{Self: "b", Owner: "c", OwnerKnown: true, Given: true, GivenTo: "d", Handed: true, Asked: true, Holder: "e"}
	c, origin := Call{}, true
	for forwards := 0; ; forwards++ {
		step := hopRule(c, origin, worst)
		if step.Do != passOn {
			if forwards > maxHops+1 {
				t.Fatalf("counted after %d forwards, want at most %d", forwards, maxHops+1)
			}
			return
		}
		if forwards > maxHops+1 {
			t.Fatalf("still passed on after %d forwards", forwards)
		}
		c, origin = step.Call, false
	}
}

type fakeClockRuntime struct {
	RealRuntime
	now time.Time
}

func (f *fakeClockRuntime) Now() time.Time { return f.now }

// Custody's named questions over one expiring table, on a fake clock.
func TestCustody(t *testing.T) {
	rt := &fakeClockRuntime{now: time.Unix(1000, 0)}
	c := newCustody(rt, 10*time.Second)
	step := func(i int, what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: %s = %v, want %v", i, what, got, want)
		}
	}
	to, ok := c.GivenTo("k")
	step(1, "GivenTo(k) on an empty table", []any{to, ok}, []any{"", false})
	c.Give("k", "a")
	to, ok = c.GivenTo("k")
	step(2, "GivenTo(k) after Give(k, a)", []any{to, ok}, []any{"a", true})
	c.TakeBack("k", "z")
	_, ok = c.GivenTo("k")
	step(3, "GivenTo(k) after TakeBack by another node", ok, true)
	c.TakeBack("k", "a")
	_, ok = c.GivenTo("k")
	step(4, "GivenTo(k) after TakeBack(k, a)", ok, false)
	c.Give("k", "a")
	rt.now = rt.now.Add(11 * time.Second)
	_, ok = c.GivenTo("k")
	step(5, "GivenTo(k) past the ttl", ok, false)
	step(6, "given count after expiry", c.given.Load(), 0)

	c.Handed("h", "b")
	to, ok = c.HandedTo("h")
	step(7, "HandedTo(h)", []any{to, ok}, []any{"b", true})
	t0 := rt.now
	c.Received("r", "c")
	step(8, "ReceivedSince(r, c, t0)", c.ReceivedSince("r", "c", t0), true)
	step(9, "ReceivedSince(r, c, later)", c.ReceivedSince("r", "c", t0.Add(time.Millisecond)), false)
	step(10, "ReceivedSince(r, other)", c.ReceivedSince("r", "d", t0), false)

	id := CounterID{Key: "q", Window: time.Second}
	_, first := c.FirstAsk(id, "s")
	step(11, "FirstAsk new", first, true)
	c.AskAnswered(id, "s", "holder")
	h, first := c.FirstAsk(id, "s")
	step(12, "FirstAsk again", []any{h, first}, []any{"holder", false})
	rt.now = rt.now.Add(11 * time.Second)
	_, first = c.FirstAsk(id, "s")
	step(13, "FirstAsk past the ttl", first, true)

	c.Give("x", "a")
	c.Give("y", "b")
	c.NewRing(func(key string) bool { return key == "x" }, true)
	by, ok := c.CountedBy("x")
	step(14, "CountedBy(x) after a ring change that gives x here", []any{by, ok}, []any{"a", true})
	_, ok = c.GivenTo("x")
	step(15, "GivenTo(x) after that ring change", ok, false)
	to, ok = c.GivenTo("y")
	step(16, "GivenTo(y), a key the new ring gives elsewhere", []any{to, ok}, []any{"b", true})
	_, ok = c.CountedBy("y")
	step(17, "CountedBy(y)", ok, false)
	c.NewRing(func(string) bool { return false }, true)
	to, ok = c.GivenTo("x")
	step(18, "GivenTo(x) once a ring gives x away again", []any{to, ok}, []any{"a", true})
	_, ok = c.CountedBy("x")
	step(19, "CountedBy(x) then", ok, false)
	c.NewRing(nil, false)
	_, ok = c.CountedBy("x")
	step(20, "CountedBy(x) after the next ring change", ok, false)
	_, ok = c.GivenTo("y")
	step(21, "GivenTo(y) with no ring", ok, false)
}
