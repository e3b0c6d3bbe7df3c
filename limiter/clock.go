package limiter

import (
	"math"
	"sync"
	"time"
)

// Clock tells a store the time. The zero value of the config field that
// holds one means the real clock, read with its monotonic part, so a wall
// clock step never moves a window.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// RealClock is the process clock.
var RealClock Clock = realClock{}

// FakeClock is a manual clock for tests and examples. Safe for concurrent use.
type FakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewFakeClock returns a clock standing at t.
func NewFakeClock(t time.Time) *FakeClock { return &FakeClock{t: t} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// microClock turns a Clock into microseconds since the Unix epoch that
// never step backwards: the wall reading is taken once, and every later
// reading adds the (monotonic, for the real clock) time elapsed since.
type microClock struct {
	clock  Clock
	origin time.Time
	base   int64
	// real is set for the process clock: time.Since(origin) reads only
	// the monotonic clock, where Clock.Now reads the wall clock too, and
	// the hot path pays for every clock read.
	real bool
}

func newMicroClock(c Clock) microClock {
	if c == nil {
		c = RealClock
	}
	o := c.Now()
	_, real := c.(realClock)
	return microClock{clock: c, origin: o, base: o.UnixMicro(), real: real}
}

func (m *microClock) now() int64 {
	if m.real {
		return m.base + int64(time.Since(m.origin)/time.Microsecond)
	}
	return m.base + int64(m.clock.Now().Sub(m.origin)/time.Microsecond)
}

// wall converts a reading of now back into a time.Time.
func (m *microClock) wall(us int64) time.Time { return time.UnixMicro(us) }

// ceilMilli rounds a µs instant up to whole milliseconds.
func ceilMilli(us int64) int64 {
	if us > math.MaxInt64-1000 {
		return us
	}
	ms := us / 1000
	if us%1000 > 0 {
		ms++
	}
	return ms * 1000
}
