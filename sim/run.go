package sim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/chaos"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/ring"
)

// Options configure Run.
type Options struct {
	// Nodes is the initial cluster size, 3..7 (0: the seed chooses).
	Nodes int
	// NewCore builds each node's core. Default: the real owner.Router
	// (NewRouterCore).
	NewCore CoreFactory
	// Watchdog is the real time a task may keep the baton. Default 5 s.
	Watchdog time.Duration
	// Trace collects the core's per-key trace (for a failing seed's
	// report; it costs time).
	Trace bool
	// Leases runs the lease mode (sim/lease.go): nodes grant leases, and
	// each node decides its single-key client calls from leases it holds
	// when it can. The plan is the seed's, leases or not.
	Leases bool
	// Buckets makes every key's limit a token bucket of the plan's Uses
	// per Window (capacity Uses) instead of a sliding log, and the checker
	// holds it to a bucket's bound (check.go). The plan is the seed's.
	Buckets bool
}

// Result is one seed's run.
type Result struct {
	Seed uint64
	Plan Plan
	// History is the run's canonical record, byte for byte the same for
	// the same seed: every call with its times and verdict, every fault.
	History []byte
	Calls   []chaos.Call
	Check   Check
	// Err is a failure of the run itself (a panic in a task, the
	// watchdog, a core that would not start).
	Err error
	// Steps is how many times a task ran.
	Steps int64
	// Trace holds, per key, the core's trace and the calls (Options.Trace).
	Trace map[string][]string
	// Events are the faults as they happened.
	Events []Event
}

// Failed reports whether the seed broke a promise or the run failed.
func (r *Result) Failed() bool { return r.Err != nil || len(r.Check.Failures) > 0 }

// Reason is the first thing that failed ("" when the seed passed).
func (r *Result) Reason() string {
	if r.Err != nil {
		return "run: " + r.Err.Error()
	}
	return r.Check.First()
}

// Event is a fault as it happened (virtual times).
type Event struct {
	Kind     FaultKind
	Nodes    []string
	From, To time.Duration // To: when it ended (0: it did not)
	// Lag is the replication bound of the nodes cut off or crashed: the
	// longest a change of theirs may have gone unshipped.
	Lag time.Duration
}

type simNode struct {
	idx      int
	name     string
	inc      int
	up       bool // takes client calls
	proc     *Proc
	rt       *Runtime
	peers    *Peers
	view     *View
	core     Core
	engine   *limiter.Memory
	replicas *limiter.Memory
	leases   *nodeLeases // Options.Leases
}

type harness struct {
	opt   Options
	plan  Plan
	s     *Scheduler
	net   *Network
	mem   *Membership
	nodes []*simNode
	procs []*Proc
	calls []chaos.Call
	log   []string
	trace map[string][]string
	evs   []Event
	err   error
	away  int // nodes leaving or not yet back from a restart
}

// Run runs seed's plan and checks its history.
func Run(seed uint64, opt Options) Result {
	plan := NewPlan(seed, opt.Nodes)
	if opt.NewCore == nil {
		opt.NewCore = NewRouterCore
	}
	h := &harness{opt: opt, plan: plan, trace: map[string][]string{}}
	h.s = NewScheduler(seed^0x5c4ed, opt.Watchdog)
	h.net = NewNetwork(h.s, seed^0x4e7, plan.Net)
	h.mem = NewMembership(h.s, h.net, seed^0x3e3b, plan.Member, ring.Config{PartitionCount: plan.Partitions})
	for i := range plan.Nodes + 1 {
		h.nodes = append(h.nodes, &simNode{idx: i, name: nodeName(i)})
	}
	var initial []string
	for i := range plan.Nodes {
		initial = append(initial, h.nodes[i].name)
	}
	h.mem.Form(initial)
	for i := range plan.Nodes {
		h.start(h.nodes[i])
	}
	for _, f := range plan.Faults {
		h.s.At(f.At, func() { h.fault(f) })
	}
	for _, c := range plan.Calls {
		h.s.At(c.At, func() { h.call(c) })
	}
	err := h.s.Run(plan.Load + plan.Settle)
	if err == nil {
		err = h.err
	}
	steps := h.s.Steps()
	if err == nil || !strings.Contains(err.Error(), "watchdog") {
		if e := h.s.Shutdown(h.procs); e != nil && err == nil {
			err = e
		}
	}
	for _, n := range h.nodes {
		h.closeStores(n)
	}
	res := Result{Seed: seed, Plan: plan, Calls: h.calls, Err: err, Steps: steps, Trace: h.trace, Events: h.evs}
	sort.SliceStable(res.Calls, func(i, j int) bool { return res.Calls[i].Start < res.Calls[j].Start })
	res.History = h.history(res.Calls)
	res.Check = check(plan, res.Calls, h.evs, opt.Buckets)
	return res
}

func (h *harness) logf(format string, args ...any) {
	h.log = append(h.log, fmt.Sprintf("%v ", h.s.Now())+fmt.Sprintf(format, args...))
}

func (h *harness) closeStores(n *simNode) {
	if n.engine != nil {
		n.engine.Close()
		n.replicas.Close()
		n.engine, n.replicas = nil, nil
	}
}

// start brings up an incarnation of n.
func (h *harness) start(n *simNode) {
	h.closeStores(n)
	n.inc++
	p := h.plan
	n.proc = h.s.NewProc(fmt.Sprintf("%s#%d", n.name, n.inc))
	h.procs = append(h.procs, n.proc)
	// Each incarnation's clock starts somewhere else: only ages travel.
	origin := time.Date(2026, 1, 1, n.idx, n.inc*7, 0, 0, time.UTC)
	n.rt = NewRuntime(n.proc, origin, p.Rates[n.idx])
	n.peers = h.net.NewPeers(n.name, n.rt)
	idSeed := p.Seed*1000003 + uint64(n.idx)*1009 + uint64(n.inc)
	n.engine = limiter.NewMemory(limiter.MemoryConfig{Clock: n.rt, SweepInterval: -1, Seed: idSeed*2 + 1})
	n.replicas = limiter.NewMemory(limiter.MemoryConfig{Clock: n.rt, SweepInterval: -1, Keys: n.engine.Budget(), Seed: idSeed*2 + 2})
	n.view = h.mem.Join(n.name, n.rt, nil)
	core, err := h.opt.NewCore(Env{Name: n.name, Runtime: n.rt, Peers: n.peers, Members: n.view,
		Engine: n.engine, Replicas: n.replicas, Replication: p.Replication, Leases: h.opt.Leases})
	if err != nil {
		h.err = errors.Join(h.err, fmt.Errorf("sim: starting %s: %w", n.name, err))
		h.s.Fail(h.err)
		return
	}
	n.core = core
	if h.opt.Trace {
		name := n.name
		core.SetTrace(func(key, what string, rv uint64) {
			h.trace[key] = append(h.trace[key], fmt.Sprintf("%9.3fs %s: %s (ring %04x)", h.s.Now().Seconds(), name, what, rv&0xffff))
		})
	}
	n.view.SetCore(core)
	h.net.Attach(n.name, n.rt, core)
	core.Start()
	if h.opt.Leases {
		h.startLeases(n, idSeed)
	}
	n.up = true
	h.logf("start %s#%d", n.name, n.inc)
}

// kill ends n's incarnation at once.
func (h *harness) kill(n *simNode) {
	n.up = false
	n.proc.Kill()
	h.net.Detach(n.name)
}

// lag is n's replication bound now: its unshipped changes' age, plus a
// shipment's time; a whole window when its ring changed within that time
// (its successors may be new and hold nothing yet).
func (h *harness) lag(n *simNode) time.Duration {
	p := h.plan
	lag := n.core.ReplicationLag() + 20*time.Millisecond + 2*(p.Net.Delay+p.Net.Jitter)
	if h.s.Now()-n.view.LastChange <= lag+50*time.Millisecond {
		lag += p.Window
	}
	return lag
}

func (h *harness) fault(f Fault) {
	now := h.s.Now()
	h.logf("fault %s", f)
	switch f.Kind {
	case Crash:
		n := h.nodes[f.Node]
		if !n.up {
			return
		}
		ev := Event{Kind: Crash, Nodes: []string{n.name}, From: now, Lag: h.lag(n)}
		h.kill(n)
		h.mem.Crash(n.name)
		if f.Dur > 0 {
			idx := len(h.evs)
			h.s.At(now+f.Dur, func() {
				h.start(n)
				h.evs[idx].To = h.s.Now()
			})
		}
		h.evs = append(h.evs, ev)
	case Leave:
		h.leave(h.nodes[f.Node], 0, nil)
	case Restart:
		h.leave(h.nodes[f.Node], f.Dur, nil)
	case Rolling:
		// One node after another, each once the one before is back, as
		// an operator (or a deployment) does it.
		var step func(i int)
		step = func(i int) {
			if i < len(f.Grp) {
				h.leave(h.nodes[f.Grp[i]], f.Dur/2+1, func() { h.s.At(h.s.Now()+f.Dur, func() { step(i + 1) }) })
			}
		}
		step(0)
	case Join:
		n := h.nodes[f.Node]
		if n.up || n.proc != nil {
			return
		}
		h.evs = append(h.evs, Event{Kind: Join, Nodes: []string{n.name}, From: now})
		h.start(n)
	case Partition, OneWay:
		grp := names(f.Grp)
		ev := Event{Kind: f.Kind, Nodes: grp, From: now}
		for _, x := range f.Grp {
			if n := h.nodes[x]; n.up {
				ev.Lag = max(ev.Lag, h.lag(n))
			}
		}
		for _, a := range grp {
			for _, n := range h.nodes {
				if containsString(grp, n.name) {
					continue
				}
				h.net.Cut(a, n.name)
				if f.Kind == Partition {
					h.net.Cut(n.name, a)
				}
			}
		}
		h.mem.Reachability()
		idx := len(h.evs)
		h.evs = append(h.evs, ev)
		h.s.At(now+f.Dur, func() {
			h.logf("heal")
			h.net.Heal()
			h.mem.Reachability()
			h.evs[idx].To = h.s.Now()
		})
	case Slow:
		n := h.nodes[f.Node]
		if !n.up {
			return
		}
		h.evs = append(h.evs, Event{Kind: Slow, Nodes: []string{n.name}, From: now, To: now + f.Dur})
		h.net.SetSlow(n.name, 30*time.Millisecond)
		proc := n.proc
		for t := now; t < now+f.Dur; t += 250 * time.Millisecond {
			h.s.At(t, func() { proc.Pause(time.Duration(20+int(t/time.Millisecond)%130) * time.Millisecond) })
		}
		h.s.At(now+f.Dur, func() { h.net.SetSlow(n.name, 0) })
	}
}

func containsString(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// leave has n leave gracefully: drain, leave the gossip, wait for the
// views to see it, exit; back (a new incarnation, the same name) after
// back when that is not 0 (then done runs). While another node is away
// (leaving, or not yet back) the leave waits: the whole cluster leaving
// at once is no rolling restart, and its counts are lost by design.
func (h *harness) leave(n *simNode, back time.Duration, done func()) {
	if h.away > 0 {
		h.s.At(h.s.Now()+100*time.Millisecond, func() { h.leave(n, back, done) })
		return
	}
	if !n.up {
		if done != nil {
			done()
		}
		return
	}
	h.away++
	p := h.plan
	n.up = false
	kind := Leave
	if back > 0 {
		kind = Restart
	}
	idx := len(h.evs)
	h.evs = append(h.evs, Event{Kind: kind, Nodes: []string{n.name}, From: h.s.Now()})
	rt, core, proc := n.rt, n.core, n.proc
	proc.Go("leave", func() {
		ctx, cancel := rt.WithTimeout(context.Background(), 5*time.Second)
		err := core.Drain(ctx)
		cancel()
		h.logf("%s drained: %v", n.name, err)
		h.mem.Leave(n.name)
		_ = rt.Sleep(context.Background(), p.Member.LearnMax+200*time.Millisecond)
		_ = core.Close()
		h.s.At(h.s.Now(), func() {
			if n.proc != proc {
				return
			}
			h.kill(n)
			h.mem.Exit(n.name)
			h.logf("%s exited", n.name)
			if back == 0 {
				h.away--
				return
			}
			h.s.At(h.s.Now()+back, func() {
				h.start(n)
				h.evs[idx].To = h.s.Now()
				h.away--
				if done != nil {
					done()
				}
			})
		})
	})
}

// call makes one client call through the planned node, or the next node
// that takes calls.
func (h *harness) call(c PlannedCall) {
	var n *simNode
	for i := range h.nodes {
		if m := h.nodes[(c.Node+i)%len(h.nodes)]; m.up {
			n = m
			break
		}
	}
	if n == nil {
		return
	}
	p := h.plan
	entries := make([]limiter.Entry, len(c.Keys))
	for i, k := range c.Keys {
		entries[i] = limiter.Entry{Key: p.Keys[k], Limit: limiter.Limit{Algorithm: limiter.SlidingLog, Uses: int64(p.Uses), Window: p.Window}}
		if h.opt.Buckets {
			entries[i].Limit.Algorithm = limiter.TokenBucket
		}
	}
	rt, core, nl := n.rt, n.core, n.leases
	n.proc.Go("client", func() {
		start := h.s.Now()
		if nl != nil && len(entries) == 1 && nl.decide(entries[0]) {
			// Decided from a lease this node holds, without a round trip.
			h.calls = append(h.calls, chaos.Call{Key: entries[0].Key, Node: n.name, Start: start, End: start, Answered: true, Allowed: true})
			if h.opt.Trace {
				h.trace[entries[0].Key] = append(h.trace[entries[0].Key], fmt.Sprintf("%9.3fs %s: ADMITTED from a lease", start.Seconds(), n.name))
			}
			return
		}
		done := false
		record := func(v limiter.Verdict, err error) {
			done = true
			end := h.s.Now()
			for _, e := range entries {
				cl := chaos.Call{Key: e.Key, Node: n.name, Start: start, End: end, Answered: true, Allowed: err == nil && v.Allowed}
				if err != nil {
					cl.Fallback, cl.Err, cl.Msg = "deny", errKind(err), err.Error()
				}
				h.calls = append(h.calls, cl)
				if h.opt.Trace {
					what := "refused"
					switch {
					case err != nil:
						what = "error (deny): " + err.Error()
					case v.Allowed:
						what = "ADMITTED"
					}
					h.trace[e.Key] = append(h.trace[e.Key], fmt.Sprintf("%9.3fs %s: call from %.3fs %s", end.Seconds(), n.name, start.Seconds(), what))
				}
			}
		}
		defer func() {
			if !done { // the node died under the call: nobody was answered
				for _, e := range entries {
					h.calls = append(h.calls, chaos.Call{Key: e.Key, Node: n.name, Start: start, End: h.s.Now(), Err: "Killed"})
				}
			}
		}()
		ctx, cancel := rt.WithTimeout(context.Background(), p.Timeout)
		v, err := core.Call(ctx, entries, false)
		cancel()
		record(v, err)
	})
}

func errKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "DeadlineExceeded"
	case errors.Is(err, context.Canceled):
		return "Canceled"
	case errors.Is(err, owner.ErrShuttingDown):
		return "ShuttingDown"
	case errors.Is(err, owner.ErrUnavailable):
		return "Unavailable"
	}
	return "Other"
}

// history is the run's canonical record.
func (h *harness) history(calls []chaos.Call) []byte {
	var b strings.Builder
	for _, l := range h.log {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	for _, c := range calls {
		fmt.Fprintf(&b, "%s %s %d %d %t %t %s\n", c.Key, c.Node, c.Start, c.End, c.Answered, c.Allowed, c.Err)
	}
	return []byte(b.String())
}
