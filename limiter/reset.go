package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// ErrUnsupported is matched (errors.Is) by the *UnsupportedError of a store
// asked for something it cannot do, such as Reset.
var ErrUnsupported = errors.New("limiter: not supported by this store")

// UnsupportedError says that a store cannot do an operation, and names
// both, so an operator reads which store of a stack lacked it.
type UnsupportedError struct {
	// Store names the store (its Go type, e.g. "*redis.Store").
	Store string
	// Op is the operation, e.g. "reset".
	Op string
	// Reason, when set, says why or what would work instead.
	Reason string
}

// Error returns "limiter: STORE cannot OP[: REASON]".
func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("limiter: %s cannot %s", e.Store, e.Op)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Resetter is implemented by stores that can forget counters, so an
// operator can unlock a user. Reset forgets, for each key, the counter of
// each limit given (a counter is named by its key, algorithm and window:
// Uses, Burst, Name, Calendar and Zone do not name it); with no limits,
// every counter of each key, whatever its algorithm and window. The next
// call on a forgotten counter starts from nothing.
//
// Reset is idempotent: forgetting a counter that does not exist (never
// used, expired, reset already) succeeds. Bad input (no keys, an empty or
// oversized key, an invalid limit) is an *InputError naming the field
// ("keys[2]", "limits[0].window"). A store that can forget named counters
// but not find every counter of a key returns an *UnsupportedError when
// called without limits. Stores wrapping another store pass Reset through
// (see Reset), keeping its *UnsupportedError when it has none.
//
// Reset does not keep the slices.
type Resetter interface {
	Reset(ctx context.Context, keys []string, limits ...Limit) error
}

// Reset forgets counters of keys in s (see Resetter): those of limits, or
// with none every counter of each key. A store that is not a Resetter
// gives an *UnsupportedError (matching ErrUnsupported) naming it.
func Reset(ctx context.Context, s Store, keys []string, limits ...Limit) error {
	if s == nil {
		return invalid("store", "must not be nil")
	}
	r, ok := s.(Resetter)
	if !ok {
		return &UnsupportedError{Store: fmt.Sprintf("%T", s), Op: "reset", Reason: "it does not implement limiter.Resetter"}
	}
	return r.Reset(ctx, keys, limits...)
}

// CheckReset validates a reset against the bounds (zero fields mean their
// defaults): one key at least and at most MaxEntries, each non-empty and
// at most MaxKeyBytes, at most MaxEntries limits, each valid. It names the
// bad field as "keys[i]" or "limits[i].window".
func (b Bounds) CheckReset(keys []string, limits []Limit) error {
	b = b.WithDefaults()
	if len(keys) == 0 {
		return invalid("keys", "must not be empty")
	}
	if len(keys) > b.MaxEntries {
		return bound("keys", "%d keys, more than the bound of %d", len(keys), b.MaxEntries)
	}
	for i, k := range keys {
		if k == "" {
			return invalid("keys["+strconv.Itoa(i)+"]", "must not be empty")
		}
		if len(k) > b.MaxKeyBytes {
			return bound("keys["+strconv.Itoa(i)+"]", "%d bytes, longer than the bound of %d", len(k), b.MaxKeyBytes)
		}
	}
	if len(limits) > b.MaxEntries {
		return bound("limits", "%d limits, more than the bound of %d", len(limits), b.MaxEntries)
	}
	for i := range limits {
		if err := limits[i].Validate(); err != nil {
			return prefixField("limits["+strconv.Itoa(i)+"]", err)
		}
	}
	return nil
}

// Reset forgets counters (see Resetter). Without limits it walks the
// key's shard for the key's counters of every algorithm and window,
// holding that shard's lock while it does: an operator's action, not a
// hot-path call.
func (m *Memory) Reset(ctx context.Context, keys []string, limits ...Limit) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if err := m.bounds.CheckReset(keys, limits); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.Forget(keys, limits)
	return nil
}

// Forget drops counters as Reset does, without checking its input, and
// returns the counters it dropped, each as an entry whose limit carries
// the counter's algorithm and window (a cluster node replicates the
// deletions). Keys are owned by the caller.
func (m *Memory) Forget(keys []string, limits []Limit) []Entry {
	var gone []Entry
	for _, key := range keys {
		s := &m.shards[m.shardOf(key)]
		s.mu.Lock()
		if len(limits) > 0 {
			for _, l := range limits {
				if m.dropLocked(s, key, l.Algorithm, Micros(l.Window)) {
					gone = append(gone, Entry{Key: key, Limit: Limit{Algorithm: l.Algorithm, Window: l.Window}})
				}
			}
		} else {
			gone = m.dropKeyLocked(s, key, gone)
		}
		s.mu.Unlock()
	}
	return gone
}

// dropLocked drops one counter and reports whether it was held. Callers
// hold s.mu.
func (m *Memory) dropLocked(s *shard, key string, alg Algorithm, w int64) bool {
	ck := counterKey{key: key, window: w}
	var ok bool
	switch alg {
	case SlidingLog:
		_, ok = s.logs[ck]
		delete(s.logs, ck)
	case SlidingWindow:
		var st *WindowState
		if st, ok = s.windows[ck]; ok {
			m.markReset(s, ck, alg, windowExpiry(st, w))
		}
		delete(s.windows, ck)
	case FixedWindow:
		var st *FixedState
		if st, ok = s.fixed[ck]; ok {
			m.markReset(s, ck, alg, fixedExpiry(st))
		}
		delete(s.fixed, ck)
	case Concurrency:
		_, ok = s.slots[ck]
		delete(s.slots, ck)
	default:
		var st *BucketState
		if st, ok = s.buckets[ck]; ok {
			m.markReset(s, ck, TokenBucket, max(bucketExpiry(st), s.movesUntil(ck)))
		}
		delete(s.buckets, ck)
		delete(s.holds, ck)
		delete(s.moves, ck)
	}
	if ok {
		m.count(-1)
	}
	return ok
}

// dropKeyLocked drops every counter of key in s, appending each to gone.
// Callers hold s.mu.
func (m *Memory) dropKeyLocked(s *shard, key string, gone []Entry) []Entry {
	add := func(alg Algorithm, w int64) {
		m.count(-1)
		gone = append(gone, Entry{Key: key, Limit: Limit{Algorithm: alg, Window: MicrosDuration(w)}})
	}
	for k := range s.logs {
		if k.key == key {
			delete(s.logs, k)
			add(SlidingLog, k.window)
		}
	}
	for k, st := range s.windows {
		if k.key == key {
			m.markReset(s, k, SlidingWindow, windowExpiry(st, k.window))
			delete(s.windows, k)
			add(SlidingWindow, k.window)
		}
	}
	for k, st := range s.buckets {
		if k.key == key {
			m.markReset(s, k, TokenBucket, max(bucketExpiry(st), s.movesUntil(k)))
			delete(s.buckets, k)
			delete(s.holds, k)
			delete(s.moves, k)
			add(TokenBucket, k.window)
		}
	}
	for k, st := range s.fixed {
		if k.key == key {
			m.markReset(s, k, FixedWindow, fixedExpiry(st))
			delete(s.fixed, k)
			add(FixedWindow, k.window)
		}
	}
	for k := range s.slots {
		if k.key == key {
			delete(s.slots, k)
			add(Concurrency, k.window)
		}
	}
	return gone
}

// resetKey names a counter of a counting algorithm (sliding window, fixed
// window, token bucket): those share counterKeys across their maps.
type resetKey struct {
	ck  counterKey
	alg Algorithm
}

// resetMark is when a counter was reset (µs), kept until no receipt
// recorded before then can give anything back: the dropped state's
// expiry (its windows over, its bucket full, its moves record over).
type resetMark struct{ at, until int64 }

// markReset records that Reset drops counter (ck, alg), whose state would
// have expired at until. Callers hold s.mu.
func (m *Memory) markReset(s *shard, ck counterKey, alg Algorithm, until int64) {
	now := m.clock.now()
	if until <= now {
		return // no receipt of it can give anything back now
	}
	if s.resets == nil {
		s.resets = map[resetKey]resetMark{}
	}
	k := resetKey{ck, alg}
	s.resets[k] = resetMark{at: now, until: max(until, s.resets[k].until)}
	s.lower(until)
}

// resetSince reports whether counter (ck, alg) was reset at or after at
// (µs): a receipt recorded then gives nothing back. Callers hold s.mu.
func (s *shard) resetSince(ck counterKey, alg Algorithm, at int64) bool {
	if len(s.resets) == 0 {
		return false
	}
	mk, ok := s.resets[resetKey{ck, alg}]
	return ok && at <= mk.at
}

var _ Resetter = (*Memory)(nil)

// Reset forgets counters in the store in shadow mode (see Resetter).
func (s *ShadowStore) Reset(ctx context.Context, keys []string, limits ...Limit) error {
	if s.inner == nil {
		return invalid("store", "must not be nil")
	}
	return Reset(ctx, s.inner, keys, limits...)
}

var _ Resetter = (*ShadowStore)(nil)
