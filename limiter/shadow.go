package limiter

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/internal/throttle"
)

// ShadowLogEvery is the least time between two would-refuse lines of a
// ShadowStore: the pacing of fallback's failure log (the first line at
// once, then at most one every 10 s counting the calls not logged).
const ShadowLogEvery = 10 * time.Second

// MsgWouldRefuse is the message of a ShadowStore's log line (INFO), for
// log searches. Its attributes: limit (the first entry's Name), rule (its
// limit, as ParseLimit reads it), entries (when the batch had more than
// one), the key (only with ShadowLogKeys), retry_after (the refusal's wait)
// and not_logged (the would-refuse calls since the previous line that
// got none).
const MsgWouldRefuse = "rate limit would have refused"

// ShadowStore is a Store in shadow mode: it asks its store as usual and
// lets every call through. A call the store refused comes back Allowed
// with Shadowed set ("would have refused"); it is counted (Stats) and
// logged, throttled. Safe for concurrent use.
//
// Shadow mode changes the answer, never the counting: the store records
// exactly what it records without shadow mode. A call it refuses records
// nothing, as a refusal costs no quota; a call it allows takes its uses.
// This is envoyproxy/ratelimit's shadow_mode, where "all functions of the
// rate limiting service are executed as normal" and only the response
// code becomes OK. So the would-refuse count is what enforcing would have
// refused, with the same counts behind it, and switching shadow mode off
// changes no counter.
//
// PeekMany answers shadowed too (a look answers what a consume would) but
// is not counted or logged: it is not a decision. A store error is not a
// verdict and is returned as it is, so failure handling (the fallback
// policies, a middleware's OnStoreError) stays in charge of outages; a
// failure policy's refusal (Deny) is a verdict and is let through, with
// its Failure kept.
type ShadowStore struct {
	inner  Store
	logger *slog.Logger
	clock  Clock
	logKey func(string) slog.Attr

	calls, wouldRefuse atomic.Int64

	mu       sync.Mutex
	throttle throttle.Throttle
}

var _ Store = (*ShadowStore)(nil)

// ShadowOption configures Shadow.
type ShadowOption func(*ShadowStore)

// ShadowLogger sets the logger of the would-refuse lines. Default
// slog.Default().
func ShadowLogger(l *slog.Logger) ShadowOption {
	return func(s *ShadowStore) {
		if l != nil {
			s.logger = l
		}
	}
}

// ShadowClock sets the clock that paces the log. Default RealClock.
func ShadowClock(c Clock) ShadowOption {
	return func(s *ShadowStore) {
		if c != nil {
			s.clock = c
		}
	}
}

// ShadowLogKeys logs the first entry's key as the attribute f returns
// (key_hash=, say: keys are often client addresses or user ids). Default:
// keys are not logged.
func ShadowLogKeys(f func(key string) slog.Attr) ShadowOption {
	return func(s *ShadowStore) { s.logKey = f }
}

// Shadow returns store in shadow mode. A nil store makes every call fail
// with an *InputError naming "store".
func Shadow(store Store, opts ...ShadowOption) *ShadowStore {
	s := &ShadowStore{inner: store, logger: slog.Default(), clock: RealClock, throttle: throttle.Throttle{Every: ShadowLogEvery}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ConsumeMany asks the store; a refusal comes back Allowed and Shadowed,
// counted and logged.
func (s *ShadowStore) ConsumeMany(ctx context.Context, entries []Entry) (Verdict, error) {
	if s.inner == nil {
		return Verdict{}, invalid("store", "must not be nil")
	}
	v, err := s.inner.ConsumeMany(ctx, entries)
	if err != nil {
		return v, err
	}
	s.calls.Add(1)
	if v.Allowed && !v.Shadowed {
		return v, nil
	}
	s.wouldRefuse.Add(1)
	s.log(entries, &v)
	return Shadowed(v), nil
}

// PeekMany answers what ConsumeMany would, recording, counting and
// logging nothing.
func (s *ShadowStore) PeekMany(ctx context.Context, entries []Entry) (Verdict, error) {
	if s.inner == nil {
		return Verdict{}, invalid("store", "must not be nil")
	}
	v, err := s.inner.PeekMany(ctx, entries)
	if err != nil || v.Allowed {
		return v, err
	}
	return Shadowed(v), nil
}

// Shadowed returns a refusal as shadow mode answers it: Allowed, with
// Shadowed set and no Release (the store recorded nothing). An allowed
// verdict is returned as it is.
func Shadowed(v Verdict) Verdict {
	if v.Allowed {
		return v
	}
	v.Allowed, v.Shadowed, v.Release = true, true, nil
	return v
}

// ShadowStats counts what a ShadowStore decided. Every field only grows.
type ShadowStats struct {
	// Calls: ConsumeMany calls the store answered.
	Calls int64
	// WouldRefuse: of those, the ones it refused, let through Shadowed.
	WouldRefuse int64
}

// Stats returns the counts so far.
func (s *ShadowStore) Stats() ShadowStats {
	return ShadowStats{Calls: s.calls.Load(), WouldRefuse: s.wouldRefuse.Load()}
}

// Unwrap returns the store in shadow mode (to close it, say).
func (s *ShadowStore) Unwrap() Store { return s.inner }

// log writes MsgWouldRefuse, throttled.
func (s *ShadowStore) log(entries []Entry, v *Verdict) {
	now := s.clock.Now()
	s.mu.Lock()
	ok, notLogged := s.throttle.Hit(now)
	s.mu.Unlock()
	if !ok || len(entries) == 0 {
		return
	}
	e := &entries[0]
	attrs := make([]slog.Attr, 0, 6)
	attrs = append(attrs, slog.String("limit", e.Limit.Name), slog.String("rule", e.Limit.String()))
	if len(entries) > 1 {
		attrs = append(attrs, slog.Int("entries", len(entries)))
	}
	if s.logKey != nil {
		attrs = append(attrs, s.logKey(e.Key))
	}
	attrs = append(attrs, slog.Duration("retry_after", v.RetryAfter), slog.Int64("not_logged", notLogged))
	s.logger.LogAttrs(context.Background(), slog.LevelInfo, MsgWouldRefuse, attrs...)
}
