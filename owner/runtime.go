package owner

import (
	"context"
	"sync"
	"time"
)

// Runtime is how the protocol core reads time, waits and runs work
// concurrently. Every wait of the core goes through it, so that a
// simulator can run a whole cluster of cores one task at a time on a
// virtual clock, each history following from a seed (package sim).
//
// The core never blocks on anything else while it holds a lock: a task
// either runs to its next wait (Sleep, Signal.Wait, a Peers call, the end
// of its function) or finishes.
type Runtime interface {
	// Now reads the node's monotonic clock. Readings are compared only
	// with readings of the same node; across nodes time travels as ages.
	Now() time.Time
	// Go runs f as a task of its own.
	Go(f func())
	// Sleep waits for d, or until ctx is done: then it returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
	// WithTimeout returns a context that is done d from now on this
	// runtime's clock (and when ctx is).
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
	// NewSignal returns a signal not yet fired.
	NewSignal() Signal
}

// Signal is a one-shot event tasks can wait for.
type Signal interface {
	// Fire fires the signal; later calls do nothing.
	Fire()
	// Wait returns nil once the signal fired, or ctx.Err() when ctx is
	// done first.
	Wait(ctx context.Context) error
	// Fired reports whether the signal fired.
	Fired() bool
}

// RealRuntime is the process's own runtime: goroutines, the monotonic
// clock, timers and channels. It is the default.
type RealRuntime struct{}

var _ Runtime = RealRuntime{}

// Now returns time.Now().
func (RealRuntime) Now() time.Time { return time.Now() }

// Go starts a goroutine.
func (RealRuntime) Go(f func()) { go f() }

// Sleep waits on a timer.
func (RealRuntime) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WithTimeout is context.WithTimeout.
func (RealRuntime) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// NewSignal returns a channel-backed signal.
func (RealRuntime) NewSignal() Signal { return &chanSignal{ch: make(chan struct{})} }

type chanSignal struct {
	once sync.Once
	ch   chan struct{}
}

func (s *chanSignal) Fire() { s.once.Do(func() { close(s.ch) }) }

func (s *chanSignal) Wait(ctx context.Context) error {
	select {
	case <-s.ch:
		return nil
	case <-ctx.Done():
		select {
		case <-s.ch: // both: the signal wins, as a caller checking first would see
			return nil
		default:
		}
		return ctx.Err()
	}
}

func (s *chanSignal) Fired() bool {
	select {
	case <-s.ch:
		return true
	default:
		return false
	}
}

// group runs tasks on a runtime and waits for all of them: a
// sync.WaitGroup whose Wait is a runtime wait.
type group struct {
	rt   Runtime
	mu   sync.Mutex
	n    int
	done Signal
}

func newGroup(rt Runtime) *group { return &group{rt: rt} }

// Go runs f as a task of the group.
func (g *group) Go(f func()) {
	g.mu.Lock()
	if g.n == 0 {
		g.done = g.rt.NewSignal()
	}
	g.n++
	g.mu.Unlock()
	g.rt.Go(func() {
		defer func() {
			g.mu.Lock()
			g.n--
			last := g.n == 0
			done := g.done
			g.mu.Unlock()
			if last {
				done.Fire()
			}
		}()
		f()
	})
}

// Wait waits until every task started so far has returned.
func (g *group) Wait() {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return
	}
	done := g.done
	g.mu.Unlock()
	_ = done.Wait(context.Background())
}
