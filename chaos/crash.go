package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Crash keys make a crash able to lose something. The load's hot keys are
// admitted in bursts, one per Window, so a kill usually lands when their
// last burst is about to leave its window, and by the time the survivors
// count the keys (about a second later) nothing of it is left to lose:
// replication on or off, the checker saw 0. Crash keys are the opposite:
// keys the victim owns, filled to the limit just before the kill, with a
// window (Options.CrashWindow, default 8 s) longer than the kill, the
// convergence and the calls after it together. After the kill the harness
// keeps calling them through the survivors: a new owner that adopted the
// replicas refuses every call until the window ends; one that did not
// (--replicas 0) admits the limit a second time, Uses over per key.

// crashPlan is the crash keys of one kill.
type crashPlan struct {
	keys   []string
	lc     LoadConfig // the load's config with the crash keys' limit
	h      *History   // the crash keys' calls, on the load history's clock
	filled time.Duration
	until  time.Duration // the calls after the kill stop here
}

// crashSettle is how long after the fill the kill comes: longer than the
// replication lag the bound allows (Options.ReplLag), so that with
// replication on nothing of the fill may be lost, and short against the
// window, so the keys are full when the owner dies.
func (r *run) crashSettle() time.Duration { return 3 * r.opt.ReplLag }

// planCrash picks up to Options.CrashKeys keys that victim owns (asked of
// a usable node) and fills each to the limit through the usable nodes.
//
// leave uses the same keys ("moving keys"): a leaving owner's hand-off must
// bring their full logs to the new owners, which then refuse them too.
func (r *run) planCrash(ctx context.Context, victim string) (*crashPlan, error) {
	up := r.c.Up()
	if len(up) == 0 {
		return nil, fmt.Errorf("chaos: no usable node")
	}
	lc := r.lc
	lc.Window = r.opt.CrashWindow
	p := &crashPlan{lc: lc, h: NewHistory(r.h.Origin())}
	for i := 0; len(p.keys) < r.opt.CrashKeys && i < 20*r.opt.CrashKeys; i++ {
		k := fmt.Sprintf("crash-%04d", i)
		o, err := r.c.Owner(ctx, up[0], k)
		if err != nil {
			return nil, err
		}
		if o == victim {
			p.keys = append(p.keys, k)
			r.owners[k] = o
		}
	}
	if len(p.keys) == 0 {
		return nil, fmt.Errorf("chaos: no crash key owned by %s among %d asked", victim, 20*r.opt.CrashKeys)
	}
	start := r.h.Now()
	var wg sync.WaitGroup
	for i, k := range p.keys {
		wg.Go(func() {
			for j := range lc.Uses {
				r.c.consume(up[(i+j)%len(up)], k, &p.lc, p.h)
			}
		})
	}
	wg.Wait()
	p.filled = r.h.Now()
	// Calls after the kill stop half a second before the fill's first
	// admissions leave their window: anything admitted until then lies in
	// one window with them.
	p.until = start + lc.Window - 500*time.Millisecond
	admitted := 0
	for _, c := range p.h.Calls() {
		if c.Allowed {
			admitted++
		}
	}
	r.note("filled %d keys owned by %s (%d per %v): %d of %d calls admitted in %.2fs",
		len(p.keys), victim, lc.Uses, lc.Window, admitted, len(p.keys)*lc.Uses, (p.filled - start).Seconds())
	return p, nil
}

// callCrash calls every crash key through the survivors, each key in its
// own loop with a 20 ms pause, until p.until; stop returns when they are
// done.
func (r *run) callCrash(p *crashPlan, survivors []string) (wait func()) {
	var wg sync.WaitGroup
	for i, k := range p.keys {
		wg.Go(func() {
			for j := 0; r.h.Now() < p.until; j++ {
				r.c.consume(survivors[(i+j)%len(survivors)], k, &p.lc, p.h)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	return wg.Wait
}
