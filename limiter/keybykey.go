package limiter

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// ConsumeOneFunc checks and records one entry in one step, the only thing
// a store of your own must get right (see KeyByKey). It must record
// nothing when it refuses, keep to ctx, and, when ctx was made with
// WithRelease and it can, set Verdict.Release on an allowed verdict to
// give back exactly this call's uses.
type ConsumeOneFunc func(ctx context.Context, e Entry) (Verdict, error)

// PeekOneFunc answers what ConsumeOneFunc would for one entry, recording
// nothing.
type PeekOneFunc func(ctx context.Context, e Entry) (Verdict, error)

// KeyByKeyConfig configures NewKeyByKey. Every field's zero value means
// its default.
type KeyByKeyConfig struct {
	// Peek answers one entry without recording. Default nil: PeekMany
	// allows every batch it is given (knowing nothing, it refuses
	// nothing), so a caller that peeks first is refused only at
	// ConsumeMany. With Peek set, PeekMany peeks every entry and names
	// the longest wait, and a refused ConsumeMany peeks the entries after
	// the refusing one to name the longest wait too.
	Peek PeekOneFunc
	// Bounds are checked before the first entry is consumed, so a bad
	// batch never counts part of itself. Zero fields mean the defaults.
	Bounds Bounds
	// Logger receives, at Error level, each use counted before a refusal
	// that could not be given back (its Release failed). Default
	// slog.Default().
	Logger *slog.Logger
}

// KeyByKey is a Store built from a function that consumes one entry: the
// quickest way to put a store of your own (a database, a service) behind
// the Store interface. It is not atomic across keys:
//
//   - ConsumeMany consumes the entries in order and stops at the first
//     refusal; the entries after it are not consumed. The uses counted
//     before the refusal are given back with their Verdict.Release (the
//     function is called with WithRelease), so a refused batch counts
//     against none of its entries unless a give-back fails (logged) or
//     the function gives no Release: then those uses stay counted until
//     they leave their windows, as if the caller had made one call per
//     entry.
//   - Two concurrent batches over the same keys can both be refused where
//     either alone would pass (one's uses are counted while the other
//     checks), never both admitted past a limit: each entry is one step
//     of the function.
//   - A refusal names the wait of the first refusing entry, or, with
//     KeyByKeyConfig.Peek, the longest wait of that entry and the ones
//     after it.
//   - PeekMany, without KeyByKeyConfig.Peek, allows everything.
//
// A batch of one entry keeps the whole store contract, as the function
// does. A store behind a network should implement ConsumeMany itself, in
// one round trip and one step, as the stores of this module do.
type KeyByKey struct {
	consume ConsumeOneFunc
	cfg     KeyByKeyConfig
}

var _ Store = (*KeyByKey)(nil)

// NewKeyByKey returns a Store that counts with consume, key by key. A nil
// consume is an *InputError naming "consume".
func NewKeyByKey(consume ConsumeOneFunc, cfg KeyByKeyConfig) (*KeyByKey, error) {
	if consume == nil {
		return nil, invalid("consume", "must not be nil")
	}
	cfg.Bounds = cfg.Bounds.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &KeyByKey{consume: consume, cfg: cfg}, nil
}

// counted is an entry consumed before the batch was refused.
type counted struct {
	e Entry
	v Verdict
}

// ConsumeMany consumes the entries in order, stopping at the first
// refusal and giving back what it counted before it (see KeyByKey).
func (s *KeyByKey) ConsumeMany(ctx context.Context, entries []Entry) (Verdict, error) {
	if err := s.cfg.Bounds.Check(entries); err != nil {
		return Verdict{}, err
	}
	if err := ctx.Err(); err != nil {
		return Verdict{}, err
	}
	// Every entry is asked for its Release: the ones counted before a
	// refusal are given back with it.
	one := WithRelease(ctx)
	done := make([]counted, 0, len(entries))
	for i, e := range entries {
		v, err := s.consume(one, e)
		if err == nil && v.Allowed {
			done = append(done, counted{e, v})
			continue
		}
		s.giveBack(ctx, done)
		if err != nil {
			return Verdict{}, err
		}
		return s.refusal(ctx, entries, i, v, done), nil
	}
	out := Verdict{Allowed: true, Remaining: done[0].v.Remaining, ResetAt: done[0].v.ResetAt}
	for _, c := range done[1:] {
		out.Remaining = min(out.Remaining, c.v.Remaining)
		if c.v.ResetAt.After(out.ResetAt) {
			out.ResetAt = c.v.ResetAt
		}
	}
	if WantsRelease(ctx) {
		out.Release = releaseAll(done)
	}
	return out, nil
}

// refusal builds the verdict of a batch entries[i] refused after done
// were counted and given back.
func (s *KeyByKey) refusal(ctx context.Context, entries []Entry, i int, v Verdict, done []counted) Verdict {
	out := Verdict{Remaining: v.Remaining, RetryAfter: v.RetryAfter, RetryAt: v.RetryAt}
	for _, c := range done {
		left := c.v.Remaining
		if c.v.Release != nil {
			left += c.e.cost() // given back (or its failure logged)
		}
		out.Remaining = min(out.Remaining, left)
	}
	if s.cfg.Peek == nil {
		return out
	}
	// The entries after the refusal were not consumed: peek them for the
	// longest wait. A failed peek only loses its wait.
	for _, e := range entries[i+1:] {
		pv, err := s.cfg.Peek(ctx, e)
		if err != nil || pv.Allowed {
			continue
		}
		out.Remaining = min(out.Remaining, pv.Remaining)
		if pv.RetryAfter > out.RetryAfter {
			out.RetryAfter, out.RetryAt = pv.RetryAfter, pv.RetryAt
		}
	}
	return out
}

// giveBack releases the uses counted before a refusal or a failure. It
// runs even when the caller's context is done, so a call the caller gave
// up on leaves no count behind.
func (s *KeyByKey) giveBack(ctx context.Context, done []counted) {
	rctx := context.WithoutCancel(ctx)
	for i := len(done) - 1; i >= 0; i-- {
		c := done[i]
		if c.v.Release == nil {
			continue // the function cannot give back: the use stays counted
		}
		if err := c.v.Release(rctx); err != nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelError,
				"limiter: KeyByKey could not give back a use counted before a refusal; it stays counted until it leaves its window",
				slog.Int("entry", i), slog.Any("err", err))
		}
	}
}

// releaseAll gives back every entry of an allowed batch, once; nil when
// one of them cannot be given back (Release gives back exactly this call,
// or is not offered).
func releaseAll(done []counted) func(context.Context) error {
	for _, c := range done {
		if c.v.Release == nil {
			return nil
		}
	}
	var once sync.Once
	var err error
	return func(ctx context.Context) error {
		once.Do(func() {
			var errs []error
			for _, c := range done {
				errs = append(errs, c.v.Release(ctx))
			}
			err = errors.Join(errs...)
		})
		return err
	}
}

// PeekMany answers with KeyByKeyConfig.Peek for every entry, recording
// nothing; without it, it allows every batch (Remaining is then each
// limit's Uses less the cost, the most it could be, and ResetAt is zero).
func (s *KeyByKey) PeekMany(ctx context.Context, entries []Entry) (Verdict, error) {
	if err := s.cfg.Bounds.Check(entries); err != nil {
		return Verdict{}, err
	}
	if err := ctx.Err(); err != nil {
		return Verdict{}, err
	}
	if s.cfg.Peek == nil {
		out := Verdict{Allowed: true, Remaining: entries[0].Limit.Uses - entries[0].cost()}
		for i := range entries[1:] {
			e := &entries[i+1]
			out.Remaining = min(out.Remaining, e.Limit.Uses-e.cost())
		}
		return out, nil
	}
	out := Verdict{Allowed: true}
	for i, e := range entries {
		v, err := s.cfg.Peek(ctx, e)
		if err != nil {
			return Verdict{}, err
		}
		if i == 0 || v.Remaining < out.Remaining {
			out.Remaining = v.Remaining
		}
		switch {
		case !v.Allowed:
			if out.Allowed || v.RetryAfter > out.RetryAfter {
				out.RetryAfter, out.RetryAt = v.RetryAfter, v.RetryAt
			}
			out.Allowed, out.ResetAt = false, time.Time{}
		case out.Allowed && v.ResetAt.After(out.ResetAt):
			out.ResetAt = v.ResetAt
		}
	}
	return out, nil
}
