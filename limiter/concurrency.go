package limiter

import (
	"context"
	"time"
)

// Concurrency limits ("at most N calls of this tenant in flight").
//
// A Concurrency limit's state is a set of slots, each an allowed call's id,
// cost and the instant it was taken. A call of cost c takes c slots when
// Uses-c or fewer are held; otherwise it is refused, and RetryAfter is the
// time until enough of the held slots reach their TTL (the limit's
// Window). The verdict's Release frees exactly its slots, once; a slot
// whose holder vanished (crashed, lost its connection) frees itself when
// its TTL has passed since it was taken, so the TTL must exceed the
// longest call the limit guards.
//
// The arithmetic is a sliding log's (LogState): a slot is a use that
// leaves the log when its TTL ends or when it is released by id. It is a
// counter of its own, though, apart from a sliding log of the same key
// and window: Memory keeps the slots in their own map, the adapters under
// their own key or algorithm, and CounterState carries them in Log (ages,
// never clock readings) with Algorithm Concurrency, so hand-off and
// replication move held slots like a log, ids and all, and a release
// made after a move still finds its slots at the key's new owner.

// ErrNotSupported is ErrUnsupported (reset.go), by the name concurrency
// limits used first.
var ErrNotSupported = ErrUnsupported

// ConcurrencyLimit returns the limit of at most n calls in flight whose
// slots free themselves ttl after they were taken: "concurrency:N/TTL".
func ConcurrencyLimit(n int64, ttl time.Duration) Limit {
	return Limit{Algorithm: Concurrency, Uses: n, Window: ttl}
}

// Acquire takes one of n slots of key, each held until release is called
// or ttl has passed since it was taken (the holder vanished), whichever
// comes first. When the verdict is not Allowed, the call holds nothing:
// v.RetryAfter says when a slot frees at the latest (its TTL; a release
// may free one sooner). release is never nil: on a refusal it does
// nothing, so a caller may always defer it. It is idempotent and frees
// exactly this call's slot.
//
// A store that cannot give a slot back (its verdicts carry no Release)
// returns an error matching ErrNotSupported; the slot it took then frees
// itself at its TTL.
func Acquire(ctx context.Context, s Store, key string, n int64, ttl time.Duration) (release func(context.Context) error, v Verdict, err error) {
	return AcquireLimit(ctx, s, key, ConcurrencyLimit(n, ttl))
}

// AcquireLimit is Acquire with a Limit, which must be a Concurrency limit
// (it may carry a Name, for metrics).
func AcquireLimit(ctx context.Context, s Store, key string, l Limit) (release func(context.Context) error, v Verdict, err error) {
	if l.Algorithm != Concurrency {
		return noRelease, Verdict{}, invalid("limit.algorithm", "Acquire takes a concurrency limit, not %v", l.Algorithm)
	}
	v, err = s.ConsumeMany(WithRelease(ctx), []Entry{{Key: key, Limit: l}})
	if err != nil || !v.Allowed {
		return noRelease, v, err
	}
	if v.Release == nil {
		if v.Failure != nil {
			// A failure policy let the call through uncounted: it holds
			// no slot, so there is nothing to give back.
			return noRelease, v, nil
		}
		return noRelease, v, &UnsupportedError{Store: "limiter.Acquire", Op: "release", Reason: "the store's verdict has no Release, so the slot would be held until its TTL"}
	}
	return v.Release, v, nil
}

func noRelease(context.Context) error { return nil }

// logsOf returns the map of a log-kept algorithm's counters: the sliding
// logs, or the concurrency limits' slots.
func (s *shard) logsOf(alg Algorithm) map[counterKey]*LogState {
	if alg == Concurrency {
		return s.slots
	}
	return s.logs
}
