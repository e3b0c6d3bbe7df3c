package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/internal/sabotage"
)

// Scenario is one chaos script and the promise it checks.
type Scenario struct {
	// Name is the -scenario word.
	Name string
	// Doc says what happens, in one line.
	Doc string
	// Replicas and Fallback are the nodes' flags.
	Replicas int
	Fallback string
	// Promise is false for a contrast run: its checks are reported, never
	// failed; the run passes when its Guard check breaks.
	Promise bool
	// Protection is what the scenario's Guard check depends on; Sabotage
	// turns exactly that off (Sabotaged). Guard is the check row (a
	// prefix of its name) that must break when it is off.
	Protection string
	Sabotage   Sabotage
	Guard      string
	// Contrast: this run has its Sabotage on and passes only when Guard
	// broke: the check can tell the protection on from off.
	Contrast bool

	initial func(n int) int
	script  func(ctx context.Context, r *run) error
	judge   func(r *run, calls []Call, res *Result)
}

// Scenarios lists every scenario, in the order "all" runs them. Each one's
// Protection, Sabotage and Guard say which protection its promise checks
// and how to show that the check fails without it (Sabotaged, chaos
// -sabotage); kill-owner-no-replicas is kill-owner sabotaged, run by "all".
func Scenarios() []*Scenario {
	all := func(n int) int { return n }
	overshoot := "overshoot keys/max/total (all nodes, owners' verdicts)"
	moves := Sabotage{Env: []string{sabotage.HandOff}, NoReplicas: true,
		Doc: "RINGLIMIT_SABOTAGE=handoff (hand-offs and first-use fetches carry no state) and --replicas 0 (no replica stands in)"}
	movesProt := "a key's state moves with its ownership: hand-off and first-use fetch"
	kill := &Scenario{Name: "kill-owner", Doc: "SIGKILL the hottest key's owner (and of crash keys filled just before) at 1/3, restart it (same name and ports) at 2/3", Replicas: 1, Fallback: "deny", Promise: true,
		Protection: "replication: each owner streams its changes to its ring successor, which adopts them when the owner dies",
		Sabotage:   Sabotage{NoReplicas: true, Doc: "--replicas 0"}, Guard: "crash keys",
		initial: all, script: scriptKill, judge: judgeKill}
	noRepl := kill.Sabotaged()
	noRepl.Name = "kill-owner-no-replicas"
	noRepl.Doc = "kill-owner with --replicas 0: the crash keys' uses are lost, and the crash-keys check must break"
	return []*Scenario{
		{Name: "steady", Doc: "no fault", Replicas: 1, Fallback: "local", Promise: true, initial: all,
			Protection: "one owner counts each key: every node forwards a call to the key's owner",
			Sabotage:   Sabotage{Env: []string{sabotage.Forward}, Doc: "RINGLIMIT_SABOTAGE=forward (every node counts every key itself)"}, Guard: overshoot,
			script: func(context.Context, *run) error { return nil }, judge: judgeExact},
		{Name: "join", Doc: "a node joins under load at 1/3", Replicas: 1, Fallback: "local", Promise: true,
			Protection: movesProt, Sabotage: moves, Guard: overshoot,
			initial: func(n int) int { return n - 1 }, script: scriptJoin, judge: judgeExact},
		{Name: "leave", Doc: "the hottest key's owner (and of moving keys filled just before) leaves (SIGTERM, hand-off) at 1/3", Replicas: 1, Fallback: "local", Promise: true,
			Protection: movesProt, Sabotage: moves, Guard: "moving keys",
			initial: all, script: scriptLeave, judge: judgeExact},
		{Name: "rolling-restart", Doc: "every node in turn: SIGTERM, wait for exit, restart, wait until all see it", Replicas: 1, Fallback: "local", Promise: true,
			Protection: movesProt, Sabotage: moves, Guard: overshoot,
			initial: all, script: scriptRolling, judge: judgeExact},
		kill,
		noRepl,
		{Name: "stop-owner", Doc: "SIGSTOP the hottest key's owner for 5 s at 1/3, then SIGCONT", Replicas: 1, Fallback: "local", Promise: true,
			Protection: "the nodes' --timeout: a call waits at most that long for an owner, then the fallback answers",
			Sabotage:   Sabotage{Timeout: 5 * time.Second, Doc: "--timeout 5s on the nodes (the callers' deadline stays 350 ms)"}, Guard: "calls unanswered",
			initial: all, script: scriptStop, judge: judgeStop},
		{Name: "partition", Doc: "isolate the hottest key's owner (nftables on lo) from 1/3 for 1/3 of the run, heal", Replicas: 1, Fallback: "local", Promise: true,
			Protection: "the majority rule: a node that sees no majority takes over no keys of members it cannot reach",
			Sabotage:   Sabotage{Env: []string{sabotage.Majority}, Doc: "RINGLIMIT_SABOTAGE=majority (every node routes by the live members it sees)"}, Guard: "minority claims",
			initial: all, script: scriptPartition, judge: judgePartition},
	}
}

// Sabotage turns one protection off for a contrast run.
type Sabotage struct {
	// Doc says what is turned off, as the run's table shows it.
	Doc string
	// Env: test-only switches of internal/sabotage, set in the nodes'
	// RINGLIMIT_SABOTAGE.
	Env []string
	// NoReplicas runs the nodes with --replicas 0.
	NoReplicas bool
	// Timeout, when > 0, is the nodes' --timeout (the callers' deadline
	// stays Options.Timeout + 100 ms).
	Timeout time.Duration
}

// Sabotaged returns the contrast run of sc: its Sabotage on, no promise,
// passing only when its Guard check breaks. The name gets "-sabotaged".
func (sc *Scenario) Sabotaged() *Scenario {
	c := *sc
	c.Name += "-sabotaged"
	c.Doc = sc.Name + " sabotaged, " + sc.Sabotage.Doc + ": its check must break"
	c.Promise, c.Contrast = false, true
	if sc.Sabotage.NoReplicas {
		c.Replicas = 0
	}
	return &c
}

// Lookup finds a scenario by name.
func Lookup(name string) (*Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
		if s.Name+"-sabotaged" == name && !s.Contrast {
			return s.Sabotaged(), true
		}
	}
	return nil, false
}

// Run runs one scenario on a fresh cluster and judges it. The error is a
// harness failure (the cluster could not be started, a fault could not be
// injected); a broken promise is Result.Passed == false.
func (rn *Runner) Run(ctx context.Context, sc *Scenario) (*Result, error) {
	opt := rn.opt
	if opt.Fallback != "" {
		sc2 := *sc
		sc2.Fallback = opt.Fallback
		sc = &sc2
	}
	dir, err := rn.logDir(sc.Name)
	if err != nil {
		return nil, err
	}
	uidBase := -1
	if os.Geteuid() == 0 {
		uidBase = 200000 + (os.Getpid()%100000)*64
	}
	c, err := NewCluster(ClusterConfig{
		Nodes: opt.Nodes, LogDir: dir, Net: 10 + os.Getpid()%200, UIDBase: uidBase,
		Args: sc.nodeArgs(opt),
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	hot, cold := hotAndCold(opt)
	r := &run{r: rn, opt: opt, sc: sc, c: c, lc: LoadConfig{
		Workers: opt.Workers, Pace: opt.Pace, Hot: hot, Cold: cold, HotShare: opt.HotShare,
		Uses: opt.Uses, Window: opt.Window, Deadline: opt.Timeout + 100*time.Millisecond, Seed: opt.Seed,
	}}
	res := &Result{Scenario: sc.Name, Doc: sc.Doc, Nodes: opt.Nodes, Replicas: sc.Replicas, Fallback: sc.Fallback,
		Limit: fmt.Sprintf("%d per %v sliding-log", opt.Uses, opt.Window), Deadline: r.lc.Deadline, LogDir: dir, Promise: sc.Promise,
		Contrast: sc.Contrast, Guard: sc.Guard, Protection: sc.Protection}
	if sc.Contrast {
		res.Sabotage = sc.Sabotage.Doc
	}
	fail := func(err error) (*Result, error) {
		res.Err = err
		res.Tails = c.Tails(30)
		return res, err
	}
	r.logf = func(format string, args ...any) {
		at := time.Duration(0)
		if r.h != nil {
			at = r.h.Now()
		}
		fmt.Fprintf(opt.Log, "[%s %6.2fs] %s\n", sc.Name, at.Seconds(), fmt.Sprintf(format, args...))
	}
	r.logf("starting %d of %d nodes (logs in %s)", sc.initial(opt.Nodes), opt.Nodes, dir)
	if err := c.StartAll(ctx, sc.initial(opt.Nodes)); err != nil {
		return fail(err)
	}
	if r.owners, err = c.Owners(ctx, c.Up()[0], append(append([]string(nil), hot...), cold...)); err != nil {
		return fail(err)
	}
	r.h = NewHistory(time.Now())
	stallMon := NewStallMonitor(r.h, 50*time.Millisecond)
	stop := c.RunLoad(r.lc, r.h)
	r.logf("load: %d workers, pace %v, %d hot + %d cold keys", opt.Workers, opt.Pace, len(hot), len(cold))
	scriptErr := make(chan error, 1)
	go func() { scriptErr <- sc.script(ctx, r) }()
	err = <-scriptErr
	end := max(opt.Duration, r.h.Now()+opt.Window+time.Second)
	if err == nil {
		err = r.at(ctx, end)
	}
	stop()
	stalls := stallMon.Stop()
	res.Load = r.h.Now()
	if r.r.fw != nil {
		_ = r.r.fw.Heal(context.Background())
	}
	if err != nil {
		return fail(err)
	}
	r.logf("load stopped; probing")
	up := c.Up()
	if err := c.WaitMembers(ctx, up, up, 30*time.Second); err != nil {
		return fail(fmt.Errorf("before the probe: %w", err))
	}
	probeKeys := append(append([]string(nil), hot...), cold[:min(24, len(cold))]...)
	probe, err := c.Probe(ctx, probeKeys, r.lc)
	if err != nil {
		return fail(err)
	}
	calls := r.h.Calls()
	if err := WriteCSV(filepath.Join(dir, "history.csv"), calls); err != nil {
		r.logf("%v", err)
	}
	if err := WriteCSV(filepath.Join(dir, "probe.csv"), probe); err != nil {
		r.logf("%v", err)
	}
	res.Faults = r.closedFaults()
	for _, p := range c.Procs {
		ns, err := NodeStalls(r.h, p.Name, p.Log)
		if err != nil {
			r.logf("%v", err)
		}
		stalls = append(stalls, ns...)
	}
	spec := Spec{Uses: opt.Uses, Window: opt.Window, Deadline: r.lc.Deadline, Timeout: opt.Timeout, Faults: res.Faults, Stalls: stalls}
	res.Report = Check(calls, spec)
	res.Overshoot = CheckOvershoot(calls, opt.Uses, opt.Window, nil)
	res.Probe = CheckProbe(probe, opt.Uses)
	res.Notes = r.notes
	sc.judge(r, calls, res)
	res.Passed = true
	guarded := false // the first row named by Guard is the guard
	for i, ch := range res.Checks {
		if ch.Promise && !ch.OK {
			res.Passed = false
		}
		if !guarded && sc.Guard != "" && strings.HasPrefix(ch.Name, sc.Guard) {
			guarded = true
			res.Checks[i].Guard = true
			if !ch.OK {
				res.Caught = true
			}
		}
	}
	if sc.Contrast {
		res.Passed = res.Caught
	}
	if !res.Passed {
		res.Tails = c.Tails(30)
	}
	return res, nil
}

func scriptJoin(ctx context.Context, r *run) error {
	if err := r.at(ctx, r.opt.Duration/3); err != nil {
		return err
	}
	name := r.c.Procs[len(r.c.Procs)-1].Name
	r.faultAt = r.h.Now()
	r.note("%s joins", name)
	if err := r.restartNode(ctx, name); err != nil {
		return err
	}
	r.note("%s ready and seen by all", name)
	return nil
}

func scriptLeave(ctx context.Context, r *run) error {
	if err := r.at(ctx, r.opt.Duration/3); err != nil {
		return err
	}
	x, err := r.hotOwner(ctx)
	if err != nil {
		return err
	}
	moving, err := r.planCrash(ctx, x)
	if err != nil {
		return err
	}
	r.crash = moving
	if err := r.at(ctx, moving.filled+r.crashSettle()); err != nil {
		return err
	}
	r.c.SetUp(x, false)
	end := r.fault("leave", x, true)
	r.faultAt = r.h.Now()
	r.note("SIGTERM %s (owner of %s, and of %d moving keys filled %.2fs before)", x, r.lc.Hot[0], len(moving.keys), (r.faultAt - moving.filled).Seconds())
	defer r.callCrash(moving, r.c.Up())()
	if err := r.c.Proc(x).Signal(syscall.SIGTERM); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	werr := r.c.Proc(x).Wait(wctx)
	end()
	r.note("%s exited (%v)", x, errOrOK(werr))
	if r.c.Proc(x).Running() {
		return fmt.Errorf("chaos: %s did not exit within 20 s of SIGTERM", x)
	}
	up := r.c.Up()
	return r.c.WaitMembers(ctx, up, up, 20*time.Second)
}

func scriptRolling(ctx context.Context, r *run) error {
	if err := r.at(ctx, r.opt.Duration/5); err != nil {
		return err
	}
	for _, p := range r.c.Procs {
		start := r.h.Now()
		r.c.SetUp(p.Name, false)
		end := r.fault("restart", p.Name, true)
		if err := p.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		werr := p.Wait(wctx)
		cancel()
		if p.Running() {
			return fmt.Errorf("chaos: %s did not exit within 20 s of SIGTERM", p.Name)
		}
		exited := r.h.Now()
		if err := r.restartNode(ctx, p.Name); err != nil {
			return err
		}
		end()
		r.note("%s: SIGTERM, exited after %.2fs (%v), back and seen by all after %.2fs", p.Name, (exited - start).Seconds(), errOrOK(werr), (r.h.Now() - start).Seconds())
	}
	return nil
}

func scriptKill(ctx context.Context, r *run) error {
	if err := r.at(ctx, r.opt.Duration/3); err != nil {
		return err
	}
	x, err := r.hotOwner(ctx)
	if err != nil {
		return err
	}
	var watched []string
	for _, k := range r.lc.Hot {
		if r.owners[k] == x {
			watched = append(watched, k)
		}
	}
	crash, err := r.planCrash(ctx, x)
	if err != nil {
		return err
	}
	r.crash = crash
	if err := r.at(ctx, crash.filled+r.crashSettle()); err != nil {
		return err
	}
	r.faultAt = r.h.Now()
	end, err := r.kill(x)
	if err != nil {
		return err
	}
	r.note("SIGKILL %s (owner of %d hot keys: %v, and of %d crash keys filled %.2fs before)", x, len(watched), watched, len(crash.keys), (r.faultAt - crash.filled).Seconds())
	survivors := r.c.Up()
	crashDone := r.callCrash(crash, survivors)
	r.watchOwners(ctx, survivors, watched, x, 10*time.Second)
	crashDone()
	if err := r.at(ctx, 2*r.opt.Duration/3); err != nil {
		return err
	}
	r.restart = r.h.Now()
	r.note("restarting %s (same name and ports)", x)
	if err := r.restartNode(ctx, x); err != nil {
		return err
	}
	end()
	r.note("%s back and seen by all", x)
	return nil
}

func scriptStop(ctx context.Context, r *run) error {
	if err := r.at(ctx, r.opt.Duration/3); err != nil {
		return err
	}
	x, err := r.hotOwner(ctx)
	if err != nil {
		return err
	}
	r.c.SetUp(x, false)
	end := r.fault("stop", x, true)
	r.faultAt = r.h.Now()
	if err := r.c.Proc(x).Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	r.note("SIGSTOP %s (owner of %s)", x, r.lc.Hot[0])
	select {
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
		_ = r.c.Proc(x).Signal(syscall.SIGCONT)
		return ctx.Err()
	}
	if err := r.c.Proc(x).Signal(syscall.SIGCONT); err != nil {
		return err
	}
	r.note("SIGCONT %s", x)
	all := append(r.c.Up(), x)
	if err := r.c.WaitMembers(ctx, all, all, 30*time.Second); err != nil {
		return err
	}
	r.c.SetUp(x, true)
	end()
	r.note("%s seen alive by all again", x)
	return nil
}

func scriptPartition(ctx context.Context, r *run) error {
	fw := r.r.fw
	if fw == nil {
		return r.r.fwErr
	}
	if err := r.at(ctx, r.opt.Duration/3); err != nil {
		return err
	}
	x, err := r.hotOwner(ctx)
	if err != nil {
		return err
	}
	r.target = x
	r.faultAt = r.h.Now()
	if err := fw.Isolate(ctx, r.c.Proc(x), r.c.Procs); err != nil {
		return err
	}
	defer fw.Heal(context.Background())
	stopClaims := r.watchClaims(x, append(append([]string(nil), r.lc.Hot...), r.lc.Cold[:min(24, len(r.lc.Cold))]...))
	defer stopClaims()
	end := r.fault("partition", x, false)
	r.note("isolated %s (owner of %s) from the other nodes", x, r.lc.Hot[0])
	var others []string
	for _, n := range r.c.Up() {
		if n != x {
			others = append(others, n)
		}
	}
	if err := r.c.WaitMembers(ctx, others, others, 15*time.Second); err != nil {
		r.note("majority did not drop %s: %v", x, err)
	} else {
		r.note("majority sees itself without %s", x)
	}
	if err := r.at(ctx, r.faultAt+max(r.opt.Duration/3, 3*time.Second)); err != nil {
		return err
	}
	cl := stopClaims()
	r.claims = &cl
	if err := fw.Heal(ctx); err != nil {
		return err
	}
	r.healAt = r.h.Now()
	end()
	r.note("healed (rules removed)")
	all := r.c.Up()
	if err := r.c.WaitMembers(ctx, all, all, 30*time.Second); err != nil {
		return fmt.Errorf("after healing: %w", err)
	}
	r.healConv = r.h.Now() - r.healAt
	r.note("all nodes see all again %.2fs after healing", r.healConv.Seconds())
	return nil
}

func errOrOK(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// nodeArgs are the nodes' flags for sc, its sabotage applied when it is a
// contrast run.
func (sc *Scenario) nodeArgs(opt Options) NodeArgs {
	a := NodeArgs{Binary: opt.Binary, Replicas: sc.Replicas, Fallback: sc.Fallback, Timeout: opt.Timeout}
	if sc.Contrast {
		a.Sabotage = strings.Join(sc.Sabotage.Env, ",")
		if sc.Sabotage.NoReplicas {
			a.Replicas = 0
		}
		if sc.Sabotage.Timeout > 0 {
			a.Timeout = sc.Sabotage.Timeout
		}
	}
	return a
}
