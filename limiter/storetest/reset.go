package storetest

import (
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// reset runs limiter.Reset and fails the test on an error.
func (s *suite) reset(keys []string, limits ...limiter.Limit) {
	s.t.Helper()
	s.step++
	if err := limiter.Reset(ctx(s.t), s.store, keys, limits...); err != nil {
		s.t.Fatalf("step %d: Reset(%q, %v) error: %v", s.step, keys, limits, err)
	}
}

// Reset forgets exactly the counters it names: a limit given names one
// counter (key, algorithm, window) and leaves the key's other windows and
// other keys alone; no limits forget every window of the key. It is
// idempotent, and bad input is an *InputError naming the field.
func testReset(s *suite) {
	k, k2 := s.key("k"), s.key("k2")
	l, other := s.limit(2, 20*time.Second), s.limit(1, 30*time.Second)
	// Both windows must last the test: a fixed window of l that ends
	// between two steps empties its counters.
	s.roomAll(5*time.Second, l.Window, other.Window)
	if s.opts.NoReset {
		err := limiter.Reset(ctx(s.t), s.store, []string{k}, l)
		if !errors.Is(err, limiter.ErrUnsupported) {
			s.t.Fatalf("Reset on a store that says it cannot: %v, want an error matching limiter.ErrUnsupported", err)
		}
		return
	}
	use := func(key string, l limiter.Limit, n int) {
		s.t.Helper()
		for i := 0; i < n; i++ {
			s.want(s.consume(limiter.Entry{Key: key, Limit: l}), true, "filling the counter")
		}
		s.want(s.consume(limiter.Entry{Key: key, Limit: l}), false, "the counter is full")
	}
	use(k, l, 2)
	use(k, other, 1)
	use(k2, l, 2)

	// A limit of other uses names the same counter: the algorithm and
	// window name it, not Uses.
	named := l
	named.Uses = 7
	s.reset([]string{k}, named)
	v := s.consume(limiter.Entry{Key: k, Limit: l, Cost: 2})
	s.want(v, true, "both uses after the reset of the counter")
	s.want(s.consume(limiter.Entry{Key: k, Limit: other}), false, "the key's other window after a reset of one window")
	s.want(s.consume(limiter.Entry{Key: k2, Limit: l}), false, "another key after a reset of k")

	// Idempotent: again, and on a key never used.
	s.reset([]string{k2, s.key("never")}, l)
	s.reset([]string{k2}, l)
	s.want(s.consume(limiter.Entry{Key: k2, Limit: l, Cost: 2}), true, "k2 after its reset")

	// Every window of a key.
	err := limiter.Reset(ctx(s.t), s.store, []string{k})
	s.step++
	if s.opts.NoResetAll {
		if !errors.Is(err, limiter.ErrUnsupported) {
			s.t.Fatalf("step %d: Reset without limits on a store that says it cannot: %v, want limiter.ErrUnsupported", s.step, err)
		}
	} else {
		if err != nil {
			s.t.Fatalf("step %d: Reset(%q) of every window: %v", s.step, k, err)
		}
		s.want(s.consume(limiter.Entry{Key: k, Limit: other}), true, "the other window after a reset of every window")
		s.want(s.consume(limiter.Entry{Key: k, Limit: l, Cost: 2}), true, "the first window after a reset of every window")
	}

	// Bad input names the field.
	for _, c := range []struct {
		keys   []string
		limits []limiter.Limit
		field  string
	}{
		{nil, []limiter.Limit{l}, "keys"},
		{[]string{k, ""}, []limiter.Limit{l}, "keys[1]"},
		{[]string{k}, []limiter.Limit{l, {Algorithm: s.alg, Uses: 1, Window: time.Microsecond}}, "limits[1].window"},
	} {
		err := limiter.Reset(ctx(s.t), s.store, c.keys, c.limits...)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, limiter.ErrInvalid) {
			s.t.Fatalf("Reset(%q, %v) = %v, want an *InputError naming %q", c.keys, c.limits, err, c.field)
		}
	}
}
