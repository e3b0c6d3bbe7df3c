package refusal

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// DefaultSize is the number of entries a cache holds when New is given 0.
const DefaultSize = 1 << 16

// Cache remembers refusals. The zero value is not usable; call New. It is
// safe for concurrent use.
type Cache struct {
	max int // < 0: off

	// Lookups are on every call's path and take the read lock only (an
	// expired entry is a miss, left for Put's eviction, which takes the
	// soonest-ending first); n lets an empty cache skip even that.
	n  atomic.Int64
	mu sync.RWMutex
	m  map[counter]*entry
	h  byUntil // every entry of m, soonest-ending wait first
}

// counter names what a refusal applies to: a key under one limit.
type counter struct {
	key    string
	alg    limiter.Algorithm
	window time.Duration
	uses   int64
	burst  int64 // a token bucket's capacity: a larger one may pass
}

type entry struct {
	c       counter
	cost    int64     // the refused cost: a call that costs less may pass
	until   int64     // caller's clock (µs) when the wait is over
	retryAt time.Time // the owner's RetryAt, returned unchanged
	remain  int64
	idx     int // position in the heap
}

// New returns a cache of at most size entries: 0 means DefaultSize, a
// negative size turns the cache off (Get never hits, Put keeps nothing).
func New(size int) *Cache {
	if size == 0 {
		size = DefaultSize
	}
	return &Cache{max: size, m: map[counter]*entry{}}
}

// Enabled reports whether the cache keeps anything.
func (c *Cache) Enabled() bool { return c.max > 0 }

func counterOf(e *limiter.Entry) counter {
	return counter{e.Key, e.Limit.Algorithm, e.Limit.Window, e.Limit.Uses, e.Limit.Burst}
}

// Get returns the cached refusal of e at now, if the owner refused the
// same counter for a cost no larger than e's and the wait is not over.
// The verdict carries the owner's RetryAt and Remaining, and the wait
// left (RetryAfter) by the caller's clock.
//
// A debit (Entry.Debit) never hits: it is recorded whatever the budget
// says, so it must reach the store.
func (c *Cache) Get(e *limiter.Entry, now int64) (limiter.Verdict, bool) {
	if c.max <= 0 || c.n.Load() == 0 || e.Debit {
		return limiter.Verdict{}, false
	}
	k := counterOf(e)
	c.mu.RLock()
	r, ok := c.m[k]
	var v limiter.Verdict
	if ok && r.until > now && max(e.Cost, 1) >= r.cost {
		v = limiter.Verdict{Remaining: r.remain, RetryAt: r.retryAt, RetryAfter: limiter.MicrosDuration(r.until - now)}
	} else {
		ok = false
	}
	c.mu.RUnlock()
	return v, ok
}

// GetAny returns the cached refusal of a batch: when any of its entries
// has one, the batch is refused, naming the longest of those entries'
// waits (and the least Remaining). ok is false when none has.
func (c *Cache) GetAny(entries []limiter.Entry, now int64) (v limiter.Verdict, ok bool) {
	if c.max <= 0 || c.n.Load() == 0 {
		return limiter.Verdict{}, false
	}
	for i := range entries {
		w, hit := c.Get(&entries[i], now)
		if !hit {
			continue
		}
		switch {
		case !ok:
			v = w
		case w.RetryAfter > v.RetryAfter:
			v.RetryAfter, v.RetryAt = w.RetryAfter, w.RetryAt
		}
		v.Remaining = min(v.Remaining, w.Remaining)
		ok = true
	}
	return v, ok
}

// Put remembers the refusal v of e, given at now: until now + RetryAfter,
// calls for the counter costing at least e's cost are refused. A verdict
// without a wait (RetryAfter <= 0) is not kept, nor a concurrency limit's:
// its wait is the oldest slot's TTL, and a release usually ends it much
// sooner, so a refusal kept past an invalidation that raced it would
// refuse a free slot for up to the whole TTL.
func (c *Cache) Put(e *limiter.Entry, v limiter.Verdict, now int64) {
	if c.max <= 0 || v.Allowed || v.RetryAfter <= 0 || e.Limit.Algorithm == limiter.Concurrency {
		return
	}
	k := counterOf(e)
	until := now + limiter.Micros(v.RetryAfter)
	cost := max(e.Cost, 1)
	if e.Debit {
		// A refused debit says the budget is exceeded: its wait is for
		// one use (the debit itself was recorded).
		cost = 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.m[k]; ok {
		r.cost, r.until, r.retryAt, r.remain = cost, until, v.RetryAt, v.Remaining
		heap.Fix(&c.h, r.idx)
		return
	}
	if len(c.m) >= c.max {
		if until <= c.h[0].until {
			return // this one ends soonest of all: it is the one to drop
		}
		c.remove(c.h[0])
	}
	r := &entry{c: k, cost: cost, until: until, retryAt: v.RetryAt, remain: v.Remaining}
	c.m[k] = r
	heap.Push(&c.h, r)
	c.n.Store(int64(len(c.m)))
}

// Drop forgets every cached refusal of keys, under any limit: uses were
// given back, so the counters may have room before their waits are over.
func (c *Cache) Drop(keys []string) {
	if c.max <= 0 || len(keys) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) == 0 {
		return
	}
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	var gone []*entry
	for _, r := range c.h {
		if set[r.c.key] {
			gone = append(gone, r)
		}
	}
	for _, r := range gone {
		c.remove(r)
	}
}

// Clear forgets every cached refusal (the messages that would have dropped
// some may have been lost).
func (c *Cache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.h = c.h[:0]
	c.n.Store(0)
}

// Len returns the number of entries held, expired ones not yet evicted
// included.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// remove takes r out of the map and the heap; c.mu is held.
func (c *Cache) remove(r *entry) {
	delete(c.m, r.c)
	heap.Remove(&c.h, r.idx)
	c.n.Store(int64(len(c.m)))
}

// byUntil is a min-heap of entries by the end of their wait.
type byUntil []*entry

func (h byUntil) Len() int           { return len(h) }
func (h byUntil) Less(i, j int) bool { return h[i].until < h[j].until }
func (h byUntil) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *byUntil) Push(x any) {
	r := x.(*entry)
	r.idx = len(*h)
	*h = append(*h, r)
}
func (h *byUntil) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}
