package sim

import (
	"context"
	"math"
	"time"

	"github.com/ringlimit/ringlimit/owner"
)

// Runtime is one node incarnation's owner.Runtime on the scheduler: its
// clock runs at Rate times the virtual clock (up to 1% fast or slow) from
// its own origin, and its tasks belong to its Proc.
type Runtime struct {
	s      *Scheduler
	p      *Proc
	origin time.Time // the node's clock at virtual time 0
	rate   float64
}

var _ owner.Runtime = (*Runtime)(nil)

// NewRuntime returns a runtime for p's tasks whose clock reads origin at
// virtual time 0 and runs at rate (1.01: 1% fast).
func NewRuntime(p *Proc, origin time.Time, rate float64) *Runtime {
	if rate <= 0 {
		rate = 1
	}
	return &Runtime{s: p.s, p: p, origin: origin, rate: rate}
}

// Proc is the runtime's proc.
func (r *Runtime) Proc() *Proc { return r.p }

// clockAt is the node's clock reading at virtual time v.
func (r *Runtime) clockAt(v time.Duration) time.Time {
	return r.origin.Add(time.Duration(math.Round(float64(v) * r.rate)))
}

// virtual converts a duration on the node's clock to virtual time,
// rounded up (a node never wakes before its own clock says so).
func (r *Runtime) virtual(d time.Duration) time.Duration {
	return time.Duration(math.Ceil(float64(d) / r.rate))
}

// Now reads the node's clock.
func (r *Runtime) Now() time.Time { return r.clockAt(r.s.Now()) }

// Go runs f as a task of the node.
func (r *Runtime) Go(f func()) { r.p.Go("go", f) }

// Sleep waits d on the node's clock, or until ctx is done.
func (r *Runtime) Sleep(ctx context.Context, d time.Duration) error {
	s := r.s
	if d <= 0 {
		return ctx.Err()
	}
	t, ok := s.begin()
	if !ok {
		s.mu.Unlock()
		return errKilled
	}
	if err := errLocked(ctx); err != nil {
		s.mu.Unlock()
		return err
	}
	gen := t.gen
	s.atLocked(s.now+r.virtual(d), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.wakeLocked(t, gen, wokeOK)
	})
	s.watchLocked(t, ctx)
	if s.parkLocked(t) == wokeOK {
		return nil
	}
	return ctx.Err()
}

// WithTimeout returns a context done d from now on the node's clock.
func (r *Runtime) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return r.s.newCtx(ctx, r, r.s.Now()+r.virtual(max(d, 0)), true)
}

// NewSignal returns a signal not yet fired.
func (r *Runtime) NewSignal() owner.Signal { return &Signal{s: r.s} }

// Signal is a one-shot event on the scheduler.
type Signal struct {
	s       *Scheduler
	fired   bool
	waiters []waiter
}

var _ owner.Signal = (*Signal)(nil)

// NewSignal returns a signal not yet fired (for the harness).
func (s *Scheduler) NewSignal() *Signal { return &Signal{s: s} }

// Fire fires the signal and wakes its waiters.
func (g *Signal) Fire() {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.fired {
		return
	}
	g.fired = true
	for _, w := range g.waiters {
		s.wakeLocked(w.t, w.gen, wokeOK)
	}
	g.waiters = nil
}

// Wait waits until the signal fired (nil) or ctx is done (its error).
func (g *Signal) Wait(ctx context.Context) error {
	s := g.s
	t, ok := s.begin()
	if g.fired {
		s.mu.Unlock()
		return nil
	}
	if !ok {
		s.mu.Unlock()
		return errKilled
	}
	if err := errLocked(ctx); err != nil {
		s.mu.Unlock()
		return err
	}
	g.waiters = append(g.waiters, waiter{t, t.gen})
	s.watchLocked(t, ctx)
	s.parkLocked(t)
	s.mu.Lock()
	fired := g.fired
	s.mu.Unlock()
	if fired {
		return nil // both: the signal wins
	}
	return ctx.Err()
}

// Fired reports whether the signal fired.
func (g *Signal) Fired() bool {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	return g.fired
}
