package refusal

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

func mkEntry(key string, cost int64) limiter.Entry {
	return limiter.Entry{Key: key, Limit: limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 5, Window: time.Minute}, Cost: cost}
}

func refused(wait time.Duration, remaining int64) limiter.Verdict {
	return limiter.Verdict{RetryAfter: wait, RetryAt: time.UnixMilli(1_000_000 + wait.Milliseconds()), Remaining: remaining}
}

// Step table over named instants (µs on the caller's clock).
func TestCacheSteps(t *testing.T) {
	const t0, t1, t2 = int64(1_000_000), int64(1_400_000), int64(2_000_000)
	c := New(8)
	e, e2, other := mkEntry("k", 1), mkEntry("k", 2), mkEntry("other", 1)
	underOther := e
	underOther.Limit.Uses = 6
	c.Put(&e2, refused(time.Second, 0), t0) // refused for a cost of 2
	steps := []struct {
		name string
		e    limiter.Entry
		now  int64
		hit  bool
		wait time.Duration
	}{
		{"a cost of 2 at t0", e2, t0, true, time.Second},
		{"a cost of 1 may pass", e, t0, false, 0},
		{"a cost of 2 later: the wait left", e2, t1, true, 600 * time.Millisecond},
		{"another key", other, t1, false, 0},
		{"the same key under another limit", underOther, t1, false, 0},
		{"the wait is over", e2, t2, false, 0},
		{"and a moment later", e2, t2 + 1, false, 0},
	}
	for i, s := range steps {
		v, hit := c.Get(&s.e, s.now)
		if hit != s.hit || (hit && (v.RetryAfter != s.wait || v.Allowed || !v.RetryAt.Equal(time.UnixMilli(1_001_000)))) {
			t.Errorf("step %d (%s): Get = %+v, %v; want hit %v, wait %v, RetryAt unchanged", i+1, s.name, v, hit, s.hit, s.wait)
		}
	}
}

func TestCacheKeepsOnlyRefusalsWithAWait(t *testing.T) {
	c := New(8)
	e := mkEntry("k", 1)
	c.Put(&e, limiter.Verdict{Allowed: true, RetryAfter: time.Second}, 0)
	c.Put(&e, limiter.Verdict{}, 0)
	if c.Len() != 0 {
		t.Fatalf("kept %d entries of verdicts without a wait, want 0", c.Len())
	}
}

func TestBatchNamesTheLongestCachedWait(t *testing.T) {
	c := New(8)
	a, b, d := mkEntry("a", 1), mkEntry("b", 1), mkEntry("d", 1)
	c.Put(&a, refused(time.Second, 1), 0)
	c.Put(&b, refused(3*time.Second, 0), 0)
	v, ok := c.GetAny([]limiter.Entry{d, a, b}, 0)
	if !ok || v.RetryAfter != 3*time.Second || !v.RetryAt.Equal(time.UnixMilli(1_003_000)) || v.Remaining != 0 {
		t.Fatalf("GetAny = %+v, %v; want refused with b's wait (3 s), Remaining 0", v, ok)
	}
	if _, ok := c.GetAny([]limiter.Entry{d}, 0); ok {
		t.Fatal("a batch with no cached entry was refused")
	}
}

// Bounded: past its size the cache evicts the entries whose waits end
// soonest, and keeps the longer ones.
func TestEvictsSoonestEndingFirst(t *testing.T) {
	c := New(4)
	for i := range 10 {
		e := mkEntry(fmt.Sprint("k", i), 1)
		// Waits of 10 s, 1 s, 10 s, 1 s, ...: the short ones go first.
		wait := time.Second
		if i%2 == 0 {
			wait = 10*time.Second + time.Duration(i)*time.Millisecond
		}
		c.Put(&e, refused(wait, 0), 0)
		if c.Len() > 4 {
			t.Fatalf("after %d puts the cache holds %d entries, bound 4", i+1, c.Len())
		}
	}
	for i := range 10 {
		e := mkEntry(fmt.Sprint("k", i), 1)
		_, hit := c.Get(&e, 0)
		if want := i%2 == 0 && i >= 2; hit != want {
			t.Errorf("k%d: held %v, want %v (the four longest waits are kept)", i, hit, want)
		}
	}
}

func TestDropAndClear(t *testing.T) {
	c := New(64)
	for i := range 40 {
		e := mkEntry(fmt.Sprint("k", i%10), 1)
		e.Limit.Uses = int64(5 + i/10) // four limits per key
		c.Put(&e, refused(time.Duration(i+1)*time.Second, 0), 0)
	}
	c.Drop([]string{"k3", "k7", "missing"})
	if c.Len() != 32 {
		t.Fatalf("after dropping 2 keys of 4 limits each: %d entries, want 32", c.Len())
	}
	for i := range 40 {
		e := mkEntry(fmt.Sprint("k", i%10), 1)
		e.Limit.Uses = int64(5 + i/10)
		_, hit := c.Get(&e, 0)
		if want := i%10 != 3 && i%10 != 7; hit != want {
			t.Errorf("k%d under %d uses: held %v, want %v", i%10, e.Limit.Uses, hit, want)
		}
	}
	c.Clear()
	if c.Len() != 0 {
		t.Fatalf("after Clear: %d entries", c.Len())
	}
}

func TestOff(t *testing.T) {
	c := New(-1)
	e := mkEntry("k", 1)
	c.Put(&e, refused(time.Second, 0), 0)
	if _, hit := c.Get(&e, 0); hit || c.Len() != 0 || c.Enabled() {
		t.Fatal("a cache turned off kept a refusal")
	}
}

// An expired entry is a miss, and the first to go when the cache is full.
func TestExpiredEvictedFirst(t *testing.T) {
	c := New(2)
	old, live, next := mkEntry("old", 1), mkEntry("live", 1), mkEntry("next", 1)
	c.Put(&old, refused(time.Second, 0), 0)
	c.Put(&live, refused(time.Hour, 0), 0)
	now := int64(2_000_000) // old's wait is over
	if _, hit := c.Get(&old, now); hit {
		t.Fatal("an expired refusal was returned")
	}
	c.Put(&next, refused(time.Minute, 0), now)
	if _, hit := c.Get(&live, now); !hit {
		t.Fatal("the live hour-long refusal was evicted before the expired one")
	}
	if _, hit := c.Get(&next, now); !hit || c.Len() != 2 {
		t.Fatalf("the new refusal is not held (len %d)", c.Len())
	}
}

// A debit always reaches the store (it is recorded whatever the budget
// says), and a refused debit refuses later calls of any cost until its
// wait is over. Another burst of a token bucket is another limit.
func TestDebitsAndBursts(t *testing.T) {
	const t0 = int64(1_000_000)
	c := New(8)
	e := mkEntry("k", 1)
	d := mkEntry("k", 50)
	d.Debit = true
	c.Put(&d, refused(time.Second, 0), t0)
	if _, hit := c.Get(&e, t0); !hit {
		t.Fatal("a use after a refused debit of 50: miss, want the refusal (the wait is for one use)")
	}
	if _, hit := c.Get(&d, t0); hit {
		t.Fatal("a debit hit the cache: it must reach the store")
	}
	if _, hit := c.GetAny([]limiter.Entry{d, d}, t0); hit {
		t.Fatal("a batch of debits hit the cache")
	}
	b := limiter.Entry{Key: "b", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 5, Window: time.Minute, Burst: 2}}
	c.Put(&b, refused(time.Second, 0), t0)
	wide := b
	wide.Limit.Burst = 10
	if _, hit := c.Get(&wide, t0); hit {
		t.Fatal("a refusal under burst 2 answered a call under burst 10")
	}
}
