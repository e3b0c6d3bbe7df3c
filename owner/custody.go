package owner

import (
	"sync"
	"sync/atomic"
	"time"
)

// custody answers "who counts this key now, and where did its state come
// from" while rings disagree. The ring says who should own a key; custody
// holds what this node did and learned about it lately, each fact for
// FetchWindow (hand-offs and first-use fetches land well within it):
//
//   - given: this node gave the key's count to another node that claimed
//     it on a first-use fetch, or learned that another node counts it (a
//     fetch answered "held"). Calls for the key go there.
//   - handed: this node's hand-off delivered the key to its owner.
//   - received: a hand-off of the key arrived from a node.
//   - asked: this node asked a node for a counter's state on a last hop,
//     and what that node named as the holder.
//   - countedBy: another node counts the key for this one (it was given
//     there), and this node's ring gives the key back here: a first use
//     asks it too. When a later ring gives the key away again, the fact is
//     "given" again: it is one fact, read by the ring in force.
//   - reset: an operator's reset of some of the key's counters (or all)
//     was applied here; state of them that arrives later (a hand-off, a
//     fetch answer) is dropped, so it cannot bring the count back
//     (reset.go).
//
// One table, one expiry: every fact is stamped with the runtime's clock
// and read as absent once older than the table's ttl.
type custody struct {
	rt  Runtime
	ttl time.Duration

	// given counts keys with a given fact, so the hot path (every local
	// call asks GivenTo) skips the lock while there is none.
	given atomic.Int64
	// resets is set once a reset fact was recorded (reset.go).
	resets atomic.Bool

	mu   sync.Mutex
	keys map[string]*keyFacts
}

type keyFacts struct {
	givenTo, handedTo, receivedFrom, countedBy string
	givenAt, handedAt, receivedAt, countedAt   time.Time
	asked                                      map[askID]askFact
	reset                                      resetFact
}

// askID is one counter asked of one source.
type askID struct {
	id     CounterID
	source string
}

type askFact struct {
	at     time.Time
	holder string
}

// maxCustodyKeys bounds the table: past it, expired facts are pruned.
const maxCustodyKeys = 1 << 16

func newCustody(rt Runtime, ttl time.Duration) *custody {
	return &custody{rt: rt, ttl: ttl, keys: map[string]*keyFacts{}}
}

// fresh reports whether a fact stamped at is still in force at now.
func (c *custody) fresh(at, now time.Time) bool { return !at.IsZero() && now.Sub(at) <= c.ttl }

// facts returns key's facts, made when missing (callers hold mu).
func (c *custody) facts(key string, now time.Time) *keyFacts {
	f := c.keys[key]
	if f == nil {
		if len(c.keys) >= maxCustodyKeys {
			c.prune(now)
		}
		f = &keyFacts{}
		c.keys[key] = f
	}
	return f
}

// prune drops keys none of whose facts is in force (callers hold mu).
func (c *custody) prune(now time.Time) {
	for k, f := range c.keys {
		if !c.live(f, now) {
			if f.givenTo != "" {
				c.given.Add(-1)
			}
			delete(c.keys, k)
		}
	}
}

func (c *custody) live(f *keyFacts, now time.Time) bool {
	if c.fresh(f.givenAt, now) || c.fresh(f.handedAt, now) || c.fresh(f.receivedAt, now) || c.fresh(f.countedAt, now) || c.fresh(f.reset.at, now) {
		return true
	}
	for _, a := range f.asked {
		if c.fresh(a.at, now) {
			return true
		}
	}
	return false
}

// Give records that key is counted by to now (given on a fetch, or named
// as its holder).
func (c *custody) Give(key, to string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.rt.Now()
	f := c.facts(key, now)
	if f.givenTo == "" {
		c.given.Add(1)
	}
	f.givenTo, f.givenAt = to, now
}

// GivenTo returns the node key was given to, while that fact is in force.
func (c *custody) GivenTo(key string) (string, bool) {
	if c.given.Load() == 0 {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.keys[key]
	if f == nil || f.givenTo == "" {
		return "", false
	}
	if !c.fresh(f.givenAt, c.rt.Now()) {
		c.ungive(f)
		return "", false
	}
	return f.givenTo, true
}

// TakeBack forgets that key was given to from (it gave the key back: its
// hand-off arrived, or it asked for the key again).
func (c *custody) TakeBack(key, from string) {
	if c.given.Load() == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.keys[key]; f != nil && f.givenTo == from {
		c.ungive(f)
	}
}

func (c *custody) ungive(f *keyFacts) {
	f.givenTo, f.givenAt = "", time.Time{}
	c.given.Add(-1)
}

// NewRing starts a ring change. owns says which keys the new ring gives
// this node. A key given away that the new ring gives here stops being
// given: when ask is set, the node it went to becomes its countedBy fact
// (a first use asks that node, which gives it back or keeps it). A key
// given away that the new ring gives to another node stays given (this
// node still lacks its state), and a countedBy fact of a key the new ring
// gives away again becomes given again. With owns nil (no ring) every
// given and countedBy fact goes.
func (c *custody) NewRing(owns func(key string) bool, ask bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.rt.Now()
	for k, f := range c.keys {
		given := f.givenTo != "" && c.fresh(f.givenAt, now)
		counted := f.countedBy != "" && c.fresh(f.countedAt, now)
		if f.givenTo != "" && !given {
			c.ungive(f)
		}
		if !counted {
			f.countedBy, f.countedAt = "", time.Time{}
		}
		if !given && !counted {
			continue
		}
		mine := owns != nil && owns(k)
		switch {
		case owns == nil:
			if given {
				c.ungive(f)
			}
			f.countedBy, f.countedAt = "", time.Time{}
		case mine && given:
			if ask {
				f.countedBy, f.countedAt = f.givenTo, f.givenAt
			}
			c.ungive(f)
		case !mine && counted:
			if !given {
				c.given.Add(1)
			}
			f.givenTo, f.givenAt = f.countedBy, f.countedAt
			f.countedBy, f.countedAt = "", time.Time{}
		}
	}
}

// CountedBy names the node that counted key for this one before the last
// ring change, if any.
func (c *custody) CountedBy(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.keys[key]; f != nil && f.countedBy != "" && c.fresh(f.countedAt, c.rt.Now()) {
		return f.countedBy, true
	}
	return "", false
}

// Handed records that this node's hand-off delivered key to to.
func (c *custody) Handed(key, to string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.rt.Now()
	f := c.facts(key, now)
	f.handedTo, f.handedAt = to, now
}

// HandedTo returns the node this node recently handed key to, unless a
// hand-off of the key came back since (the state is here again).
func (c *custody) HandedTo(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.keys[key]; f != nil && f.handedTo != "" && c.fresh(f.handedAt, c.rt.Now()) && f.receivedAt.Before(f.handedAt) {
		return f.handedTo, true
	}
	return "", false
}

// Received records that a hand-off of key arrived from from.
func (c *custody) Received(key, from string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.rt.Now()
	f := c.facts(key, now)
	f.receivedFrom, f.receivedAt = from, now
}

// ReceivedSince reports whether a hand-off of key from from arrived at t
// or later.
func (c *custody) ReceivedSince(key, from string, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.keys[key]
	return f != nil && f.receivedFrom == from && !f.receivedAt.Before(t) && c.fresh(f.receivedAt, c.rt.Now())
}

// FirstAsk reports whether asking source for counter id is new (or the
// last ask expired), and records the ask; for an ask in force it returns
// the holder source named, if any.
func (c *custody) FirstAsk(id CounterID, source string) (holder string, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.rt.Now()
	f := c.facts(id.Key, now)
	k := askID{id, source}
	if a, ok := f.asked[k]; ok && c.fresh(a.at, now) {
		return a.holder, false
	}
	if f.asked == nil {
		f.asked = map[askID]askFact{}
	}
	f.asked[k] = askFact{at: now}
	return "", true
}

// AskAnswered records the holder source named for counter id.
func (c *custody) AskAnswered(id CounterID, source, holder string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.keys[id.Key]; f != nil {
		k := askID{id, source}
		if a, ok := f.asked[k]; ok {
			a.holder = holder
			f.asked[k] = a
		}
	}
}
