package owner

import (
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// refusalCache remembers refusals an owner gave for single-key calls, so a
// hot refused key costs no round trip until its RetryAt. It can only
// refuse more, never admit more: a hit is a refusal the owner would have
// given (or a slightly stale one, if a release freed a use meanwhile).
type refusalCache struct {
	max int
	mu  sync.Mutex
	m   map[refusalKey]refusal
}

type refusalKey struct {
	key    string
	alg    limiter.Algorithm
	window time.Duration
	uses   int64
}

type refusal struct {
	cost    int64     // the refused cost: a call that costs less may pass
	until   int64     // local clock (µs) when the wait is over
	retryAt time.Time // the owner's RetryAt, returned unchanged
	remain  int64
}

func newRefusalCache(max int) *refusalCache {
	return &refusalCache{max: max, m: map[refusalKey]refusal{}}
}

func (c *refusalCache) get(e *limiter.Entry, now int64) (limiter.Verdict, bool) {
	if c.max < 0 {
		return limiter.Verdict{}, false
	}
	k := refusalKey{e.Key, e.Limit.Algorithm, e.Limit.Window, e.Limit.Uses}
	c.mu.Lock()
	r, ok := c.m[k]
	if ok && r.until <= now {
		delete(c.m, k)
		ok = false
	}
	c.mu.Unlock()
	cost := max(e.Cost, 1)
	if !ok || cost < r.cost {
		return limiter.Verdict{}, false
	}
	return limiter.Verdict{Remaining: r.remain, RetryAt: r.retryAt, RetryAfter: limiter.MicrosDuration(r.until - now)}, true
}

func (c *refusalCache) put(e *limiter.Entry, v limiter.Verdict, now int64) {
	if c.max < 0 || v.RetryAfter <= 0 {
		return
	}
	k := refusalKey{e.Key, e.Limit.Algorithm, e.Limit.Window, e.Limit.Uses}
	r := refusal{cost: max(e.Cost, 1), until: now + limiter.Micros(v.RetryAfter), retryAt: v.RetryAt, remain: v.Remaining}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		// Full: drop expired entries, then any (map order is random), so
		// the cache stays bounded without a second structure.
		for k2, r2 := range c.m {
			if r2.until <= now || len(c.m) >= c.max {
				delete(c.m, k2)
			}
			if len(c.m) < c.max*3/4 {
				break
			}
		}
	}
	c.m[k] = r
}

func (c *refusalCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// drop forgets cached refusals of keys (a release freed uses).
func (c *refusalCache) drop(keys []string) {
	if c.max < 0 {
		return
	}
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if set[k.key] {
			delete(c.m, k)
		}
	}
}
