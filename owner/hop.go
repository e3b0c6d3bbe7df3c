package owner

import (
	"context"

	"github.com/ringlimit/ringlimit/internal/sabotage"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// maxHops is how many forwards a call takes before it is counted where it
// lands (see hopRule).
const maxHops = 3

// hopFacts is what a node knows of a call's keys when it decides where
// the call is counted: its routing ring's owner of the keys, and custody.
type hopFacts struct {
	// Self is this node.
	Self string
	// Owner is the keys' owner by this node's routing ring; "" when the
	// keys have several owners.
	Owner string
	// OwnerKnown: this node can call Owner (it has its address).
	OwnerKnown bool
	// Given: custody says another node counts the keys for now (this
	// node gave them to it on a first-use fetch, or was told it holds
	// them): GivenTo, or "" when the keys went to different nodes.
	Given   bool
	GivenTo string
	// Handed: this node's hand-off delivered every key to Owner lately;
	// Handing: a key's hand-off is under way (its state is in transit).
	Handed, Handing bool
	// Asked: the sender was asked for the keys' state (askSender), and
	// named Holder as counting them ("" for none).
	Asked  bool
	Holder string
	// Waited: the hand-off under way was waited for (awaitHandOff).
	Waited bool
}

// hopAction is what the rule says to do with a call.
type hopAction uint8

const (
	// count the call here.
	countHere hopAction = iota
	// passOn sends step.Call to step.To and answers with its result.
	passOn
	// askSender fetches the keys' state from the node that sent the call
	// (a last hop on a ring that disagrees with the sender's), then the
	// rule runs again with Asked and Holder set.
	askSender
	// awaitHandOff waits for the keys' hand-off under way, then the rule
	// runs again with Waited set.
	awaitHandOff
	// moving: the keys went to different nodes; the call fails as
	// unavailable (a caller may retry).
	moving
	// split: the keys have several owners by this node's ring; each
	// owner's part goes on to it (spread), the part this node owns is
	// decided here, all or nothing.
	split
)

// hopStep is the rule's answer.
type hopStep struct {
	Do   hopAction
	To   string
	Call Call // the call as it is sent to To
}

// hopRule says where a call is counted, as the node deciding it sees it: a
// pure function of the call and the node's facts. origin marks a call
// made on this node (not forwarded yet). The rule (package doc):
//
//  1. A call made here goes to its keys' owner by this node's ring. When
//     that is this node but custody says another node counts the keys for
//     now, it goes there (its first hop). Otherwise it is counted here.
//  2. A forwarded call that is not at its last hop (fewer than maxHops
//     forwards, not final) goes one hop further when custody names where
//     the keys are counted, or when this node's ring gives them to another
//     node it can call. When custody says some of its keys are counted
//     elsewhere but not all at one node, it fails as moving. Otherwise it
//     is counted here.
//  3. A forwarded call whose keys this node's ring gives to several owners
//     is split: each part goes one hop further to its owner, and the part
//     this node owns is decided here as a forwarded call; all or nothing.
//  4. A last hop (maxHops forwards, or final) is counted where it lands,
//     except where that would count keys whose state this node knows is
//     elsewhere:
//     a. Custody says another node counts them (given, or held), or the
//     node handed them to their owner by its ring (lately, or right now:
//     it waits for the hand-off under way): the call follows the keys,
//     once, as final with a hop count past maxHops; a call that followed
//     once already fails as moving (the caller's failure policy decides
//     it) rather than be counted from nothing.
//     b. The node's ring does not give it the keys: it first takes their
//     state from the sender; when the sender names another node as
//     counting them and the call is not final, the call goes there, as
//     final.
//
// So a call takes at most maxHops+1 forwards, and a node never counts a
// key whose state it knows is elsewhere while it can send the call there.
func hopRule(c Call, origin bool, f hopFacts) hopStep {
	if origin {
		switch {
		case f.Owner != f.Self:
			return hopStep{Do: passOn, To: f.Owner, Call: Call{Entries: c.Entries, Peek: c.Peek}}
		case f.Given && f.GivenTo == "":
			return hopStep{Do: moving}
		case f.Given:
			return hopStep{Do: passOn, To: f.GivenTo, Call: Call{Entries: c.Entries, Peek: c.Peek, Hops: 1}}
		}
		return hopStep{Do: countHere}
	}
	if f.Owner == "" {
		return hopStep{Do: split}
	}
	if !lastHop(c) {
		switch {
		case sabotage.On(sabotage.CountHandedOff): // test-only (internal/sabotage): count keys handed off
		case f.Given && f.GivenTo != "":
			return hopStep{Do: passOn, To: f.GivenTo, Call: onward(c)}
		case f.Given:
			// Some keys are counted elsewhere, not all at one node:
			// counted here, those would count from nothing.
			return hopStep{Do: moving}
		case f.Owner != "" && f.Owner != f.Self && f.OwnerKnown:
			return hopStep{Do: passOn, To: f.Owner, Call: onward(c)}
		}
		return hopStep{Do: countHere}
	}
	// A last hop. The guards keep it from being counted on a node that
	// knows the keys' state is elsewhere: it follows the state once (as
	// final, with its hops past maxHops), and a call that followed once
	// already is refused as moving rather than counted from nothing.
	guard := !sabotage.On(sabotage.LastHop) // test-only (internal/sabotage): no guard
	canFollow := c.Hops <= maxHops
	final := Call{Entries: c.Entries, Peek: c.Peek, Final: true, Hops: maxHops + 1, Direct: true}
	elsewhere := f.Owner != f.Self
	switch {
	case guard && f.Given && !sabotage.On(sabotage.CountHandedOff):
		// Custody: another node counts the keys for now (this node gave
		// them to it, or was told it holds them).
		if canFollow && f.GivenTo != "" {
			return hopStep{Do: passOn, To: f.GivenTo, Call: final}
		}
		return hopStep{Do: moving}
	case guard && elsewhere && f.Handed:
		// This node handed the keys to their owner by its ring.
		if canFollow {
			return hopStep{Do: passOn, To: f.Owner, Call: final}
		}
		return hopStep{Do: moving}
	case elsewhere && !f.Asked:
		return hopStep{Do: askSender}
	case f.Asked && f.Holder != "" && !c.Final:
		return hopStep{Do: passOn, To: f.Holder, Call: final}
	case guard && elsewhere && f.Handing && !f.Waited:
		return hopStep{Do: awaitHandOff}
	}
	return hopStep{Do: countHere}
}

// hops is how many forwards c has taken, its own included.
func hops(c Call) uint32 {
	switch {
	case c.Final:
		return maxHops
	case c.Hops == 0:
		return 1
	}
	return min(c.Hops, maxHops)
}

// lastHop reports whether c is counted where it lands (rule 4).
func lastHop(c Call) bool { return hops(c) >= maxHops }

// onward is c passed one hop further, in a request of its own: queued
// behind one in flight, a hop could wait for an RPC whose own call waits
// for the hop — a cycle broken only by the deadline.
func onward(c Call) Call {
	return Call{Entries: c.Entries, Peek: c.Peek, Hops: hops(c) + 1, Final: c.Final, Direct: true}
}

// hopFacts reads what this node knows of c's keys now, by ring rg: only
// what the rule will ask (a call made here for a key owned elsewhere, the
// hot path, reads no custody).
func (r *Router) hopFacts(rg *ring.Ring, c Call, origin bool) hopFacts {
	f := hopFacts{Self: r.self}
	owner, single := r.ownerOf(rg, c.Entries)
	if single {
		f.Owner = owner
	}
	if origin && owner != r.self {
		return f
	}
	f.GivenTo, f.Given = r.movedAny(c.Entries)
	switch {
	case origin || f.Owner == r.self:
	case !lastHop(c):
		_, f.OwnerKnown = r.cfg.Members.Addr(f.Owner)
	case f.Owner != "":
		f.Handed = r.handedAll(c.Entries, f.Owner)
		f.Handing = r.inOutbox(c.Entries)
	}
	return f
}

// underEpoch runs the rule for c again with facts read under the epoch
// lock — the one place it is taken for reading — and when the rule says
// count here, runs count while the lock is held: a hand-off takes the lock
// for writing before it exports (exclusive), so it never exports a key
// while a call that saw it as this node's records into it, and a fetch
// never gives a key away under a call counting it. known carries what the
// call learned before (Asked, Holder, Waited). When expect is set and the
// ring is no longer expect, nothing is counted and changed is true: the
// caller fetches for the new ring first.
func (r *Router) underEpoch(c Call, origin bool, known hopFacts, expect *ring.Ring, count func(rg *ring.Ring)) (step hopStep, changed bool) {
	began := r.rt.Now()
	r.epoch.RLock()
	defer r.epoch.RUnlock()
	r.slow(began, "epoch lock", "", c.Entries[0].Key)
	rg := r.ring()
	if expect != nil && rg != expect {
		return hopStep{}, true
	}
	f := r.hopFacts(rg, c, origin)
	f.Asked, f.Holder, f.Waited = known.Asked, known.Holder, known.Waited
	step = hopRule(c, origin, f)
	if step.Do == countHere {
		count(rg)
	}
	return step, false
}

// exclusive runs f with the epoch lock held for writing: every decision
// made under an older view has finished, and none starts until f returns.
func (r *Router) exclusive(f func()) {
	r.epoch.Lock()
	defer r.epoch.Unlock()
	f()
}

// prepare fetches, outside the epoch lock, the state of moved keys this
// node is about to count (a fetch waits on a peer, and a peer answering a
// fetch waits for the decisions under way on its side).
func (r *Router) prepare(ctx context.Context, rg *ring.Ring, entries []limiter.Entry) error {
	if !r.moves.active() {
		return nil
	}
	began := r.rt.Now()
	err := r.moves.ensure(ctx, r, rg, entries)
	r.slow(began, "first-use fetch", "", entries[0].Key)
	return err
}
