package sim

import (
	"context"
	"time"
)

// simCtx is a context whose deadline lies on the virtual clock: the
// scheduler closes Done when the virtual time reaches it. Deadline reads
// on the clock of the node that made it.
type simCtx struct {
	s        *Scheduler
	parent   context.Context
	rt       *Runtime // whose clock Deadline reads
	deadline time.Duration
	hasDL    bool
	done     chan struct{}
	err      error // guarded by s.mu
	children []*simCtx
	after    []*afterFunc
	waiters  []waiter
}

type waiter struct {
	t   *task
	gen uint64
}

type afterFunc struct {
	f       func()
	stopped bool
}

var _ context.Context = (*simCtx)(nil)

// newCtx returns a context done at the virtual instant deadline (none
// when !hasDL) or when parent is.
func (s *Scheduler) newCtx(parent context.Context, rt *Runtime, deadline time.Duration, hasDL bool) (*simCtx, context.CancelFunc) {
	c := &simCtx{s: s, parent: parent, rt: rt, done: make(chan struct{})}
	s.mu.Lock()
	if p, ok := parent.(*simCtx); ok && p.hasDL && (!hasDL || p.deadline < deadline) {
		deadline, hasDL = p.deadline, true
	}
	c.deadline, c.hasDL = deadline, hasDL
	switch p := parent.(type) {
	case *simCtx:
		if p.err != nil {
			s.cancelLocked(c, p.err)
		} else {
			p.children = append(p.children, c)
		}
	default:
		if err := parent.Err(); err != nil {
			s.cancelLocked(c, err)
		} else if parent.Done() != nil {
			s.watched = append(s.watched, c)
		}
	}
	if c.err == nil && hasDL {
		if deadline <= s.now {
			s.cancelLocked(c, context.DeadlineExceeded)
		} else {
			s.atLocked(deadline, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.cancelLocked(c, context.DeadlineExceeded)
			})
		}
	}
	s.mu.Unlock()
	return c, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cancelLocked(c, context.Canceled)
	}
}

// cancelLocked ends c and its children, wakes the tasks waiting on them
// and runs the functions registered by AfterFunc (the standard library's
// contexts derived from c cancel themselves there; none of them waits).
func (s *Scheduler) cancelLocked(c *simCtx, err error) {
	if c.err != nil {
		return
	}
	c.err = err
	close(c.done)
	for _, w := range c.waiters {
		s.wakeLocked(w.t, w.gen, wokeCtx)
	}
	c.waiters = nil
	for _, a := range c.after {
		if !a.stopped {
			a.stopped = true
			// Without the lock: the standard library's cancel may call
			// back into Err of this context.
			s.mu.Unlock()
			a.f()
			s.mu.Lock()
		}
	}
	c.after = nil
	children := c.children
	c.children = nil
	for _, ch := range children {
		s.cancelLocked(ch, err)
	}
}

func (c *simCtx) Deadline() (time.Time, bool) {
	if !c.hasDL {
		return c.parent.Deadline()
	}
	return c.rt.clockAt(c.deadline), true
}

func (c *simCtx) Done() <-chan struct{} { return c.done }

func (c *simCtx) Err() error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.err
}

func (c *simCtx) Value(key any) any { return c.parent.Value(key) }

// AfterFunc makes the standard library's contexts derived from c cancel
// synchronously with it (context.WithCancel uses it instead of a
// goroutine), so their cancellation is deterministic too.
func (c *simCtx) AfterFunc(f func()) (stop func() bool) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	a := &afterFunc{f: f}
	if c.err != nil {
		a.stopped = true
		c.s.mu.Unlock()
		f()
		c.s.mu.Lock()
		return func() bool { return false }
	}
	c.after = append(c.after, a)
	return func() bool {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		if a.stopped {
			return false
		}
		a.stopped = true
		return true
	}
}

func (c *simCtx) String() string { return "sim.Context" }

// watchLocked arranges for t (waiting its wait number t.gen) to be woken
// when ctx is done.
func (s *Scheduler) watchLocked(t *task, ctx context.Context) {
	switch c := ctx.(type) {
	case *simCtx:
		if c.err == nil {
			c.waiters = append(c.waiters, waiter{t, t.gen})
		}
	default:
		if ctx.Done() != nil {
			s.foreign = append(s.foreign, foreignWait{t, t.gen, ctx})
		}
	}
}

// errLocked is ctx.Err() for a caller holding s.mu.
func errLocked(ctx context.Context) error {
	if c, ok := ctx.(*simCtx); ok {
		return c.err
	}
	return ctx.Err()
}
