package fallback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Store wraps a limiter.Store with a timeout and a failure policy. It is
// itself a limiter.Store, safe for concurrent use.
type Store struct {
	inner    limiter.Store
	cfg      Config
	local    limiter.Store
	ownLocal *limiter.Memory
	log      *FailureLog
	sem      chan struct{} // one slot per call under way on inner
	stats    stats

	mu      sync.RWMutex // guards closed against wg.Add
	closed  bool
	wg      sync.WaitGroup // calls and releases under way
	closing sync.Once
}

var _ limiter.Store = (*Store)(nil)

// New wraps store. It returns an *limiter.InputError naming the field of
// a bad Config, or for a nil store.
func New(store limiter.Store, cfg Config) (*Store, error) {
	if store == nil {
		return nil, &limiter.InputError{Field: "store", Reason: "must not be nil"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{
		inner: store,
		cfg:   cfg,
		local: cfg.Local,
		log:   NewFailureLog(cfg.Logger.With("policy", cfg.Policy.String()), cfg.Clock),
		sem:   make(chan struct{}, cfg.MaxPending),
	}
	if s.local == nil && cfg.Policy == Local {
		s.ownLocal = limiter.NewMemory(limiter.MemoryConfig{Clock: cfg.Clock, Bounds: cfg.Bounds})
		s.local = s.ownLocal
	}
	return s, nil
}

// ConsumeMany asks the wrapped store, waiting at most Timeout; then the
// policy decides. Input errors (limiter.ErrInvalid) pass through. When
// the store answers after the caller got a refusal (or gave up), a count
// it recorded is released.
func (s *Store) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.do(ctx, entries, true)
}

// PeekMany is ConsumeMany recording nothing; under Local it peeks the
// local store.
func (s *Store) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.do(ctx, entries, false)
}

// call is one call under way on the wrapped store, shared by the caller
// and the goroutine that makes it.
type call struct {
	done chan struct{} // closed when v, err are set for the caller

	mu        sync.Mutex
	finished  bool // the store answered before the caller gave up
	abandoned bool // the caller gave up; the goroutine handles the answer
	release   bool // when abandoned: give back a count the answer recorded
	v         limiter.Verdict
	err       error
}

func (s *Store) do(ctx context.Context, entries []limiter.Entry, record bool) (limiter.Verdict, error) {
	if err := s.cfg.Bounds.Check(entries); err != nil {
		return limiter.Verdict{}, err
	}
	if err := ctx.Err(); err != nil {
		return limiter.Verdict{}, err
	}
	if !s.enter() {
		return limiter.Verdict{}, limiter.ErrClosed
	}
	if s.cfg.Inline {
		defer s.wg.Done()
		return s.inline(ctx, entries, record)
	}
	select {
	case s.sem <- struct{}{}:
	default:
		s.wg.Done()
		s.stats.overloaded.Add(1)
		return s.decide(ctx, entries, record, ErrOverloaded)
	}
	wantRelease := limiter.WantsRelease(ctx)
	inner := context.WithoutCancel(ctx)
	if record && !wantRelease {
		// A late answer must be releasable (under Deny, or when the
		// caller gives up), whether or not the caller asked for Release;
		// the caller's verdict then has it removed.
		inner = limiter.WithRelease(inner)
	}
	inner, cancel := context.WithTimeout(inner, s.cfg.Timeout+s.cfg.LateWait)
	c := &call{done: make(chan struct{})}
	// The caller may reuse its slice once we return: the goroutine keeps
	// a copy.
	go s.run(c, inner, cancel, append([]limiter.Entry(nil), entries...), record)

	t := time.NewTimer(s.cfg.Timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return s.answer(ctx, entries, record, wantRelease, c.v, c.err)
	case <-t.C:
		return s.abandon(ctx, c, entries, record, wantRelease, ErrTimeout)
	case <-ctx.Done():
		return s.abandon(ctx, c, entries, record, wantRelease, nil)
	}
}

// inline calls a store that keeps to its context in the caller's
// goroutine, bounded by Timeout.
func (s *Store) inline(ctx context.Context, entries []limiter.Entry, record bool) (limiter.Verdict, error) {
	var v limiter.Verdict
	var err error
	if record {
		v, err = s.inner.ConsumeMany(ctx, entries)
	} else {
		v, err = s.inner.PeekMany(ctx, entries)
	}
	return s.inlineAnswer(ctx, entries, record, v, err)
}

// inlineAnswer turns an inline call's answer into the caller's: the
// policy decides a failure that is neither the caller's input nor its
// giving up.
func (s *Store) inlineAnswer(ctx context.Context, entries []limiter.Entry, record bool, v limiter.Verdict, err error) (limiter.Verdict, error) {
	if err == nil {
		s.log.Success()
		return v, nil
	}
	if errors.Is(err, limiter.ErrInvalid) {
		return v, err // the caller's fault, not the store's
	}
	if ctx.Err() != nil {
		return limiter.Verdict{}, ctx.Err() // the caller gave up: nobody to answer
	}
	if errors.Is(err, context.DeadlineExceeded) {
		s.stats.timeouts.Add(1)
		return s.decide(ctx, entries, record, fmt.Errorf("%w (%v): %w", ErrTimeout, s.cfg.Timeout, err))
	}
	s.stats.errors.Add(1)
	return s.decide(ctx, entries, record, err)
}

var _ limiter.CallsStore = (*Store)(nil)

// Calls decides independent calls (limiter.CallsStore), each as
// ConsumeMany or PeekMany would: together on the wrapped store when it
// keeps to its context (Inline) and is a CallsStore itself, else one by
// one.
func (s *Store) Calls(ctx context.Context, calls []limiter.Call, out []limiter.CallResult) {
	inner, ok := s.inner.(limiter.CallsStore)
	if !ok || !s.cfg.Inline {
		limiter.EachCall(ctx, s, calls, out)
		return
	}
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i] = limiter.CallResult{Err: err}
		}
		return
	}
	if !s.enter() {
		for i := range out {
			out[i] = limiter.CallResult{Err: limiter.ErrClosed}
		}
		return
	}
	defer s.wg.Done()
	// idx lists the calls within bounds, built only once one is not.
	var idx []int
	bad := false
	for i := range calls {
		if err := s.cfg.Bounds.Check(calls[i].Entries); err != nil {
			out[i] = limiter.CallResult{Err: err}
			if !bad {
				bad = true
				idx = make([]int, i, len(calls))
				for j := range idx {
					idx[j] = j
				}
			}
			continue
		}
		if bad {
			idx = append(idx, i)
		}
	}
	sub, subOut := calls, out
	if bad {
		sub = make([]limiter.Call, len(idx))
		for j, i := range idx {
			sub[j] = calls[i]
		}
		subOut = make([]limiter.CallResult, len(idx))
	}
	inner.Calls(ctx, sub, subOut)
	for j := range sub {
		i := j
		if bad {
			i = idx[j]
		}
		r := subOut[j]
		c := &calls[i]
		out[i].Verdict, out[i].Err = s.inlineAnswer(ctx, c.Entries, !c.Peek, r.Verdict, r.Err)
	}
}

// enter counts a call under way, or reports that the store is closed.
func (s *Store) enter() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// run makes one call on the wrapped store and hands the answer to the
// caller or, when the caller gave up, settles it.
func (s *Store) run(c *call, ctx context.Context, cancel context.CancelFunc, entries []limiter.Entry, record bool) {
	defer s.wg.Done()
	// The slot is held until a late answer is settled too, so releases
	// count against MaxPending.
	defer func() { <-s.sem }()
	var v limiter.Verdict
	var err error
	if record {
		v, err = s.inner.ConsumeMany(ctx, entries)
	} else {
		v, err = s.inner.PeekMany(ctx, entries)
	}
	cancel()
	c.mu.Lock()
	if !c.abandoned {
		c.finished, c.v, c.err = true, v, err
		c.mu.Unlock()
		close(c.done)
		return
	}
	release := c.release
	c.mu.Unlock()
	s.settleLate(ctx, v, err, release)
}

// settleLate handles an answer that came after the caller was answered.
func (s *Store) settleLate(ctx context.Context, v limiter.Verdict, err error, release bool) {
	if err != nil || !v.Allowed {
		s.stats.lateNoCount.Add(1)
		return
	}
	if !release {
		s.stats.lateKept.Add(1)
		return
	}
	if v.Release == nil {
		// The store cannot give the use back: it stays counted.
		s.stats.lateKept.Add(1)
		s.cfg.Logger.LogAttrs(context.Background(), slogWarn, "rate limit store counted a late call it cannot release")
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout+s.cfg.LateWait)
	defer cancel()
	if rerr := v.Release(rctx); rerr != nil {
		s.stats.releaseErrors.Add(1)
		s.cfg.Logger.LogAttrs(context.Background(), slogWarn, "rate limit store: releasing a late count failed", errAttr(rerr))
		return
	}
	s.stats.lateReleased.Add(1)
}

// answer turns the wrapped store's answer into the caller's.
func (s *Store) answer(ctx context.Context, entries []limiter.Entry, record, wantRelease bool, v limiter.Verdict, err error) (limiter.Verdict, error) {
	if err == nil {
		s.log.Success()
		if !wantRelease {
			v.Release = nil
		}
		return v, nil
	}
	if errors.Is(err, limiter.ErrInvalid) {
		return v, err // the caller's fault, not the store's
	}
	s.stats.errors.Add(1)
	return s.decide(ctx, entries, record, err)
}

// abandon gives up on a call; cause nil means the caller's context ended.
func (s *Store) abandon(ctx context.Context, c *call, entries []limiter.Entry, record, wantRelease bool, cause error) (limiter.Verdict, error) {
	c.mu.Lock()
	if c.finished {
		// The answer came while the timer fired: take it.
		c.mu.Unlock()
		return s.answer(ctx, entries, record, wantRelease, c.v, c.err)
	}
	c.abandoned = true
	var v limiter.Verdict
	var err error
	if cause == nil {
		err = ctx.Err()
	} else {
		s.stats.timeouts.Add(1)
		v, err = s.decide(ctx, entries, record, fmt.Errorf("%w (%v)", cause, s.cfg.Timeout))
	}
	// A count the late answer records is given back unless the caller
	// was let through (Allow, or Local allowed): then the call ran.
	c.release = record && (err != nil || !v.Allowed)
	c.mu.Unlock()
	return v, err
}

// decide applies the policy to a failed call.
func (s *Store) decide(ctx context.Context, entries []limiter.Entry, record bool, cause error) (limiter.Verdict, error) {
	s.stats.fallbacks[s.cfg.Policy].Add(1)
	fe := &FailureError{ID: s.log.Failure(cause), Policy: s.cfg.Policy, Err: cause}
	switch s.cfg.Policy {
	case Allow:
		return limiter.Verdict{Allowed: true, Failure: fe}, nil
	case Local:
		v, err := s.decideLocal(ctx, entries, record)
		if err != nil {
			return v, err
		}
		v.Failure = fe
		return v, nil
	default:
		return limiter.Verdict{Failure: fe}, nil
	}
}

// decideLocal counts in the local store with each limit shared across
// the live members.
func (s *Store) decideLocal(ctx context.Context, entries []limiter.Entry, record bool) (limiter.Verdict, error) {
	share := int64(1)
	if s.cfg.Share != nil {
		share = max(int64(s.cfg.Share()), 1)
	}
	shared := make([]limiter.Entry, len(entries))
	var wait time.Duration
	for i, e := range entries {
		e.Limit.Uses = (e.Limit.Uses + share - 1) / share
		if e.Limit.Burst > 0 {
			e.Limit.Burst = (e.Limit.Burst + share - 1) / share
		}
		if e.Cost > e.Limit.Capacity() && !e.Debit { // a debit is counted whatever its cost
			// The share can never hold this cost: refuse for a window.
			wait = max(wait, e.Limit.Window)
		}
		shared[i] = e
	}
	if wait > 0 {
		return limiter.Verdict{RetryAfter: wait, RetryAt: s.cfg.Clock.Now().Add(wait)}, nil
	}
	// The local count is not released on a caller's behalf.
	lctx := context.WithoutCancel(ctx)
	if record {
		v, err := s.local.ConsumeMany(lctx, shared)
		v.Release = nil
		return v, err
	}
	return s.local.PeekMany(lctx, shared)
}

// Close stops taking calls (later ones get limiter.ErrClosed), waits for
// the calls and late releases under way, then closes the local store it
// built and, unless KeepStoreOpen, the wrapped store. If ctx ends first,
// it closes them anyway and returns ctx's error. Idempotent.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("fallback: close: calls still under way: %w", ctx.Err())
	}
	s.closing.Do(func() {
		if s.ownLocal != nil {
			_ = s.ownLocal.Close()
		}
		if s.cfg.KeepStoreOpen {
			return
		}
		switch c := s.inner.(type) {
		case interface{ Close(context.Context) error }:
			err = errors.Join(err, c.Close(ctx))
		case interface{ Close() error }:
			err = errors.Join(err, c.Close())
		}
	})
	return err
}
