package sim

import (
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Scheduler runs tasks one at a time on a virtual clock. Each task is a
// goroutine, but only the one holding the baton runs: it gives the baton
// back when it waits (a Sleep, a Signal's Wait, a simulated RPC) or ends,
// and the scheduler then picks the next task among the runnable ones with
// its seeded generator, in the order they became runnable. When none is
// runnable, the virtual clock jumps to the next timer. The same seed and
// the same code give the same interleaving, every time.
//
// A task that keeps the baton longer than the watchdog's real-time limit
// (it blocks outside the scheduler: a raw channel wait, a mutex held across
// a wait, a real timer) fails the run with that task's stack.
type Scheduler struct {
	mu      sync.Mutex
	rng     *rand.Rand
	now     time.Duration // virtual time since the start
	seq     uint64        // timer order among equal instants
	nextID  uint64
	runq    []*task
	timers  timerHeap
	foreign []foreignWait // waits on contexts the scheduler cannot watch
	watched []*simCtx     // contexts whose parent the scheduler cannot watch
	running *task
	back    chan struct{}
	steps   atomic.Int64
	stuck   chan string
	quit    chan struct{}
	failure error
	limit   time.Duration
	stopped bool
	idle    []chan *task // goroutines waiting for a task
}

// Proc is a group of tasks that live and die together: one incarnation of
// a node. Killing it ends every task of it at its next wait.
type Proc struct {
	s     *Scheduler
	Name  string
	dead  bool
	tasks map[uint64]*task
	// pausedUntil: the proc's tasks are not run before it (a stalled
	// process); held are its tasks that became runnable meanwhile.
	pausedUntil time.Duration
	held        []*task
}

type task struct {
	id     uint64
	proc   *Proc
	name   string
	wake   chan struct{}
	gen    uint64 // counts waits: a stale wake-up names an older one
	parked bool
	reason wakeReason
	killed bool
	f      func()
	// exited: a killed task's goroutine is ending (runtime.Goexit).
}

type wakeReason uint8

const (
	wokeOK wakeReason = iota
	wokeCtx
	wokeKilled
)

type foreignWait struct {
	t   *task
	gen uint64
	ctx interface{ Err() error }
}

// errKilled is what a wait returns in a task of a killed proc while it
// unwinds (its deferred calls run; no wait parks again).
var errKilled = errors.New("sim: node killed")

// NewScheduler returns a scheduler whose choices follow seed. watchdog is
// the real time a task may keep the baton (0: 5 s).
func NewScheduler(seed uint64, watchdog time.Duration) *Scheduler {
	if watchdog <= 0 {
		watchdog = 5 * time.Second
	}
	return &Scheduler{
		rng:   rand.New(rand.NewPCG(seed, 0x5ced5ced)),
		back:  make(chan struct{}),
		stuck: make(chan string, 1),
		quit:  make(chan struct{}),
		limit: watchdog,
	}
}

// Now is the virtual time since the start.
func (s *Scheduler) Now() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// NewProc returns a live proc.
func (s *Scheduler) NewProc(name string) *Proc {
	return &Proc{s: s, Name: name, tasks: map[uint64]*task{}}
}

// Dead reports whether the proc was killed.
func (p *Proc) Dead() bool {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.dead
}

// Go runs f as a task of p. A task started on a dead proc never runs.
func (p *Proc) Go(name string, f func()) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spawnLocked(p, name, f)
}

func (s *Scheduler) spawnLocked(p *Proc, name string, f func()) {
	t := &task{id: s.nextID, proc: p, name: name, wake: make(chan struct{}, 1), killed: p.dead, f: f}
	s.nextID++
	p.tasks[t.id] = t
	s.readyLocked(t)
	// A goroutine left idle by a finished task takes it (its stack has
	// grown already); else a new one.
	if n := len(s.idle); n > 0 {
		w := s.idle[n-1]
		s.idle = s.idle[:n-1]
		w <- t
		return
	}
	w := make(chan *task, 1)
	w <- t
	go s.worker(w)
}

// worker runs tasks, one after another, on one goroutine.
func (s *Scheduler) worker(w chan *task) {
	var cur *task
	defer func() {
		if cur != nil { // a killed task's runtime.Goexit
			s.finish(cur, nil)
		}
	}()
	for {
		var t *task
		select {
		case t = <-w:
		case <-s.quit:
			return
		}
		select {
		case <-t.wake:
		case <-s.quit:
			return
		}
		cur = t
		s.runTask(t)
		cur = nil
		if !s.finish(t, w) {
			return
		}
	}
}

func (s *Scheduler) runTask(t *task) {
	defer func() {
		if r := recover(); r != nil {
			s.fail(fmt.Errorf("sim: panic in task %d %q of %s: %v\n%s", t.id, t.name, t.proc.Name, r, debug.Stack()))
		}
	}()
	if !t.killed {
		t.f()
	}
}

// readyLocked makes t runnable (held back while its proc is paused).
func (s *Scheduler) readyLocked(t *task) {
	t.parked = false
	if p := t.proc; p.pausedUntil > s.now && !t.killed {
		p.held = append(p.held, t)
		return
	}
	s.runq = append(s.runq, t)
}

// wakeLocked makes t runnable if it still waits its wait number gen.
func (s *Scheduler) wakeLocked(t *task, gen uint64, why wakeReason) {
	if !t.parked || t.gen != gen {
		return
	}
	t.reason = why
	s.readyLocked(t)
}

// finish ends t and gives the baton back; w, the goroutine's own
// channel, waits for its next task (false: the goroutine must end).
func (s *Scheduler) finish(t *task, w chan *task) bool {
	s.mu.Lock()
	delete(t.proc.tasks, t.id)
	t.f = nil
	s.running = nil
	if w != nil && !s.stopped {
		s.idle = append(s.idle, w)
	}
	s.mu.Unlock()
	select {
	case s.back <- struct{}{}:
		return w != nil
	case <-s.quit: // the run was abandoned (watchdog)
		return false
	}
}

func (s *Scheduler) fail(err error) {
	s.mu.Lock()
	if s.failure == nil {
		s.failure = err
	}
	s.mu.Unlock()
}

// Fail stops the run at the next step with err (the first failure wins).
func (s *Scheduler) Fail(err error) { s.fail(err) }

// current returns the running task; the caller must be it.
func (s *Scheduler) currentLocked() *task {
	t := s.running
	if t == nil {
		panic("sim: a runtime wait outside a task (a raw goroutine or the driver)")
	}
	return t
}

// parkLocked gives the baton back until t is woken; called with s.mu
// held, returns with it released. A killed task unwinds (runtime.Goexit).
func (s *Scheduler) parkLocked(t *task) wakeReason {
	t.parked = true
	s.running = nil
	s.mu.Unlock()
	select {
	case s.back <- struct{}{}:
	case <-s.quit:
		runtime.Goexit()
	}
	select {
	case <-t.wake:
	case <-s.quit:
		runtime.Goexit()
	}
	if t.killed {
		// The goroutine ends: its deferred calls, then exited.
		runtime.Goexit()
	}
	return t.reason
}

// begin returns the running task and whether it may wait (a killed task
// unwinding may not); it locks s.mu.
func (s *Scheduler) begin() (*task, bool) {
	s.mu.Lock()
	t := s.currentLocked()
	if t.killed {
		return t, false
	}
	t.gen++
	return t, true
}

// At runs f on the driver at virtual time at (now if past). f must not
// wait: it may start tasks, fire signals and cancel contexts.
func (s *Scheduler) At(at time.Duration, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.atLocked(at, f)
}

func (s *Scheduler) atLocked(at time.Duration, f func()) {
	if at < s.now {
		at = s.now
	}
	s.seq++
	heap.Push(&s.timers, timer{at: at, seq: s.seq, f: f})
}

// Kill ends p: every task of it stops at its next wait (deferred calls
// run), and no new task of it runs.
func (p *Proc) Kill() {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.dead {
		return
	}
	p.dead = true
	ids := make([]uint64, 0, len(p.tasks))
	for id := range p.tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		t := p.tasks[id]
		t.killed = true
		if t.parked {
			t.reason = wokeKilled
			t.parked = false
			s.runq = append(s.runq, t)
		}
	}
	for _, t := range p.held {
		s.runq = append(s.runq, t)
	}
	p.held = nil
	p.pausedUntil = 0
}

// Pause keeps p's tasks from running for d of virtual time (a stalled
// process: a GC pause, a starved machine).
func (p *Proc) Pause(d time.Duration) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.dead || d <= 0 {
		return
	}
	until := s.now + d
	if until <= p.pausedUntil {
		return
	}
	p.pausedUntil = until
	// Runnable tasks of p wait too.
	keep := s.runq[:0]
	for _, t := range s.runq {
		if t.proc == p && !t.killed {
			p.held = append(p.held, t)
		} else {
			keep = append(keep, t)
		}
	}
	clear(s.runq[len(keep):])
	s.runq = keep
	s.atLocked(until, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if p.pausedUntil != until {
			return
		}
		p.pausedUntil = 0
		s.runq = append(s.runq, p.held...)
		p.held = nil
	})
}

// Run runs tasks until virtual time until, or until nothing is left to
// run, or a task fails the run. It returns the failure.
func (s *Scheduler) Run(until time.Duration) error {
	stop := make(chan struct{})
	defer close(stop)
	go s.watch(stop)
	for {
		s.mu.Lock()
		if s.failure != nil {
			err := s.failure
			s.mu.Unlock()
			return err
		}
		if len(s.timers) > 0 && s.timers[0].at <= s.now {
			tm := heap.Pop(&s.timers).(timer)
			s.mu.Unlock()
			tm.f()
			continue
		}
		s.pollLocked()
		if len(s.runq) == 0 {
			if len(s.timers) == 0 {
				s.mu.Unlock()
				return nil
			}
			next := s.timers[0].at
			if next > until {
				s.now = max(s.now, until)
				s.mu.Unlock()
				return nil
			}
			s.now = next
			s.mu.Unlock()
			continue
		}
		i := s.rng.IntN(len(s.runq))
		t := s.runq[i]
		s.runq = slices.Delete(s.runq, i, i+1)
		s.running = t
		s.mu.Unlock()
		t.wake <- struct{}{}
		select {
		case <-s.back:
			s.steps.Add(1)
		case msg := <-s.stuck:
			s.abandon()
			return errors.New(msg)
		}
	}
}

// abandon gives up the run after the watchdog fired: the stuck task, if
// it ever unblocks, and every parked task end at once.
func (s *Scheduler) abandon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.stopped = true
		close(s.quit)
	}
}

// Steps is how many times a task was given the baton.
func (s *Scheduler) Steps() int64 { return s.steps.Load() }

// pollLocked wakes tasks waiting on contexts the scheduler cannot watch,
// and cancels contexts whose foreign parent is done.
func (s *Scheduler) pollLocked() {
	if len(s.foreign) > 0 {
		keep := s.foreign[:0]
		for _, w := range s.foreign {
			if !w.t.parked || w.t.gen != w.gen {
				continue
			}
			if w.ctx.Err() != nil {
				w.t.reason = wokeCtx
				s.readyLocked(w.t)
				continue
			}
			keep = append(keep, w)
		}
		clear(s.foreign[len(keep):])
		s.foreign = keep
	}
	if len(s.watched) > 0 {
		var done []*simCtx
		keep := s.watched[:0]
		for _, c := range s.watched {
			if c.err != nil {
				continue
			}
			if c.parent.Err() != nil {
				done = append(done, c)
				continue
			}
			keep = append(keep, c)
		}
		clear(s.watched[len(keep):])
		s.watched = keep
		for _, c := range done {
			s.cancelLocked(c, c.parent.Err())
		}
	}
}

// watch fails the run when one task keeps the baton beyond the limit.
func (s *Scheduler) watch(stop chan struct{}) {
	tick := time.NewTicker(s.limit / 5)
	defer tick.Stop()
	last, since := s.steps.Load(), time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		n := s.steps.Load()
		if n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) < s.limit {
			continue
		}
		s.mu.Lock()
		t := s.running
		s.mu.Unlock()
		if t == nil {
			continue // the driver itself is between steps
		}
		msg := fmt.Sprintf("sim: watchdog: task %d %q of %s kept the baton for %v of real time: it waits outside the runtime (a raw channel, a mutex held across a wait, a real timer or goroutine)\n%s",
			t.id, t.name, t.proc.Name, s.limit, runningStack())
		select {
		case s.stuck <- msg:
		default:
		}
		return
	}
}

// Shutdown kills every proc's tasks and runs them to their ends (their
// deferred calls), then Closes, so no goroutine is left behind. procs
// lists them all.
func (s *Scheduler) Shutdown(procs []*Proc) error {
	for _, p := range procs {
		p.Kill()
	}
	s.mu.Lock()
	s.timers = nil
	s.mu.Unlock()
	err := s.Run(s.Now())
	s.Close()
	return err
}

// Close ends the goroutines kept for tasks to come. Tasks still parked
// are abandoned (their goroutines end too, without their deferred calls:
// use Shutdown for those).
func (s *Scheduler) Close() { s.abandon() }

type timer struct {
	at  time.Duration
	seq uint64
	f   func()
}

type timerHeap []timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = timer{}
	*h = old[:len(old)-1]
	return x
}

// runningStack returns the stack of the goroutine running a task and
// not parked in the scheduler: the one that kept the baton.
func runningStack() string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("sim.(*Scheduler).runTask")) && !bytes.Contains(g, []byte("sim.(*Scheduler).parkLocked")) {
			out = append(out, string(g))
		}
	}
	if len(out) == 0 {
		return string(buf)
	}
	return strings.Join(out, "\n\n")
}
