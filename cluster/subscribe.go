package cluster

import (
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// Change is one step of the ring: Prev is the ring the subscriber saw last
// (nil in the first Change) and Next the new one. For consecutive Changes
// on one channel, the later Prev is the earlier Next.
type Change struct {
	Prev, Next *ring.Ring
}

// subscriberBuffer is how many Changes wait for a subscriber before they are
// coalesced.
const subscriberBuffer = 16

// coalesceAfter is how long a full subscriber is waited for before the
// Changes it has not read are merged.
const coalesceAfter = 50 * time.Millisecond

type subscriber struct {
	ch   chan Change
	last *ring.Ring // Next of the last Change sent
}

// Subscribe returns a channel of ring changes and a function that ends the
// subscription (and closes the channel; safe to call more than once). The
// first Change has Prev nil and Next the current ring. Changes are delivered
// in order; a subscriber that falls behind never blocks membership: once its
// buffer is full, the waiting Changes are merged into one, from the ring it
// last received to the newest. Close closes every subscription's channel.
func (c *Cluster) Subscribe() (<-chan Change, func()) {
	s := &subscriber{ch: make(chan Change, subscriberBuffer)}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.closed {
		close(s.ch)
		return s.ch, func() {}
	}
	s.last = c.ring.Load()
	s.ch <- Change{Next: s.last}
	c.subs[s] = struct{}{}
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			c.subMu.Lock()
			defer c.subMu.Unlock()
			if _, ok := c.subs[s]; ok {
				delete(c.subs, s)
				close(s.ch)
			}
		})
	}
}

// publish makes r current and hands it to every subscriber. Callers are
// serialised (rebuildMu); subMu makes Subscribe see either the old ring and
// then this Change, or the new ring and no Change.
func (c *Cluster) publish(r *ring.Ring) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.ring.Store(r)
	if c.closed {
		return
	}
	for s := range c.subs {
		s.send(r)
	}
}

// send delivers a Change to r without blocking. publish is the only sender,
// so after taking the waiting Changes back there is room for the merged one.
func (s *subscriber) send(r *ring.Ring) {
	c := Change{Prev: s.last, Next: r}
	select {
	case s.ch <- c:
		s.last = r
		return
	default:
	}
	// Full: give a reader that is merely busy a moment first. Taking
	// Changes back races a reader that reads meanwhile (it could see a
	// Change whose Prev is not the Next it last saw), so merging is kept
	// for a subscriber that really stalls.
	t := time.NewTimer(coalesceAfter)
	select {
	case s.ch <- c:
		t.Stop()
		s.last = r
		return
	case <-t.C:
	}
	// Full: take back what the subscriber has not read yet. The first one
	// taken starts where the subscriber is; the merged Change starts there.
	prev := s.last
	first := true
loop:
	for {
		select {
		case old := <-s.ch:
			if first {
				prev, first = old.Prev, false
			}
		default:
			break loop
		}
	}
	s.ch <- Change{Prev: prev, Next: r}
	s.last = r
}
