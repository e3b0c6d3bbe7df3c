package chaos

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Row is one row of a scenario's table.
type Row struct {
	Name, Got, Want string
	OK              bool
	// Promise: a failed promise fails the scenario; other rows are
	// reported only.
	Promise bool
	// Guard: the row of the scenario's Guard check (a contrast run passes
	// when it is not OK).
	Guard bool
}

// Result is one scenario's outcome.
type Result struct {
	Scenario, Doc   string
	Nodes, Replicas int
	Fallback, Limit string
	Deadline, Load  time.Duration
	Promise         bool
	Report          Report
	Overshoot       Overshoot
	Convergence     *Convergence
	// Crash is the crash keys' overshoot (kill scenarios).
	Crash  *Overshoot
	Probe  Probe
	Faults []Fault
	Checks []Row
	Notes  []string
	Passed bool
	Err    error
	// Contrast: a sabotaged run (Sabotage says what was off); it passes
	// when Caught: its Guard check broke. Caught is also set on a normal
	// run whose Guard check broke.
	Contrast, Caught            bool
	Guard, Protection, Sabotage string
	Tails, LogDir               string
}

func (res *Result) check(name, got, want string, ok, promise bool) {
	res.Checks = append(res.Checks, Row{Name: name, Got: got, Want: want, OK: ok, Promise: promise && res.Promise})
}

// judgeCommon: every call not excused answered in time, with a verdict.
func judgeCommon(r *run, res *Result) {
	rep := res.Report
	res.check(fmt.Sprintf("calls unanswered within %v", res.Deadline), fmt.Sprint(rep.Unanswered), "0", rep.Unanswered == 0, true)
	if rep.UnansweredInStall > 0 {
		res.check("late calls during a stall of the harness or their node", fmt.Sprintf("%d (longest stall %v)", rep.UnansweredInStall, rep.LongestStall.Round(time.Millisecond)), "reported", false, false)
	}
	n := 0
	other := map[string]int{}
	for k, v := range rep.Errors {
		if k != "DeadlineExceeded" && k != "Canceled" { // counted as unanswered
			n += v
			other[k] = v
		}
	}
	res.check("errors other than deadline (calls not excused)", fmt.Sprint(n)+kinds(other), "0", n == 0, true)
}

// judgeExact: the owners' verdicts are exact; those the fallback decided
// keep each node's share (judgeShares).
func judgeExact(r *run, calls []Call, res *Result) {
	judgeCommon(r, res)
	o := CheckOvershoot(calls, r.opt.Uses, r.opt.Window, func(c Call) bool { return c.Fallback == "" })
	res.check("overshoot keys/max/total (all nodes, owners' verdicts)", fmt.Sprintf("%d/%d/%d", o.Keys, o.Max, o.Total), "0/0/0", o.Total == 0 && o.Max <= 0, true)
	keyNotes(r, res, "overshoot by key (owners' verdicts):", o)
	judgeShares(r, calls, res, "all nodes", func(Call) bool { return true })
	all := res.Overshoot
	res.check("overshoot keys/max/total (all nodes, all verdicts)", fmt.Sprintf("%d/%d/%d", all.Keys, all.Max, all.Total), "reported (owners + fallback)", true, false)
	if p := r.crash; p != nil { // leave: the moving keys
		mo := CheckOvershoot(p.h.Calls(), p.lc.Uses, p.lc.Window, nil)
		res.check(fmt.Sprintf("moving keys (%d, full at the leave, %d per %v): overshoot keys/max/total", len(p.keys), p.lc.Uses, p.lc.Window),
			fmt.Sprintf("%d/%d/%d", mo.Keys, mo.Max, mo.Total), "0/0/0", mo.Total == 0 && mo.Max <= 0, true)
		keyNotes(r, res, "moving keys: overshoot by key:", mo)
		if err := WriteCSV(filepath.Join(res.LogDir, "moving-keys.csv"), p.h.Calls()); err != nil {
			r.logf("%v", err)
		}
	}
	judgeProbe(res, true)
}

func judgeProbe(res *Result, promise bool) {
	p := res.Probe
	got := fmt.Sprintf("%d/%d exact", p.Exact, p.Keys)
	if p.Exact != p.Keys {
		got += fmt.Sprintf(" (stuck %d, over %d, under %d, fallback %d: %s)", p.Stuck, p.Over, p.Under, p.Fallback, strings.Join(first(p.Bad, 5), " "))
	}
	res.check("probe after a window: exactly the limit", got, "all exact", p.Exact == p.Keys && p.Keys > 0, promise)
}

// fallbackAllowance is what the survivors' fallback may admit uncounted
// per key while a dead owner is not yet declared dead everywhere: nothing
// for deny; for local, each of the other n-1 nodes its share of the limit
// over the live members it sees (the local policy's contract), which is
// ceil(uses/(n-1)) at a survivor that has already dropped the owner while
// another still forwards to it; allow has no bound (-1).
func fallbackAllowance(policy string, nodes, uses int) int {
	switch policy {
	case "deny":
		return 0
	case "local":
		live := max(nodes-1, 1)
		return (nodes - 1) * ((uses + live - 1) / live)
	default:
		return -1
	}
}

// judgeLost checks each key's overshoot against what dying with owner may
// lose: the admissions in the ReplLag before the fault plus the fallback
// allowance. It returns the offending keys' descriptions.
func judgeLost(r *run, calls []Call, o Overshoot, res *Result, name string, promise bool) {
	judgeLostUses(r, calls, o, res, name, promise, r.opt.Uses)
}

func judgeLostUses(r *run, calls []Call, o Overshoot, res *Result, name string, promise bool, uses int) {
	allow := fallbackAllowance(res.Fallback, res.Nodes, uses)
	keys := make([]string, 0, len(o.ByKey))
	for k := range o.ByKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var over, lines []string
	for _, k := range keys {
		ko := o.ByKey[k]
		lag := AdmittedAround(calls, k, r.faultAt, r.opt.ReplLag)
		bound := lag + allow
		bad := allow >= 0 && ko.Total > bound
		mark := ""
		if bad {
			mark = "  BEYOND BOUND"
			over = append(over, k)
		}
		lines = append(lines, fmt.Sprintf("  %-8s owner %-3s overshoot max %d (window from %.2fs) total %d; admitted in the %v before the fault %d, fallback allowance %d%s",
			k, r.owners[k], ko.Max, ko.MaxAt.Seconds(), ko.Total, r.opt.ReplLag, lag, allow, mark))
	}
	want := fmt.Sprintf("per key <= admitted in the %v before the fault + %d (%s fallback)", r.opt.ReplLag, allow, res.Fallback)
	if allow < 0 {
		want = "reported (allow fallback: no bound)"
	}
	res.check(name, fmt.Sprintf("%d/%d/%d, %d beyond", o.Keys, o.Max, o.Total, len(over)), want, len(over) == 0, promise && allow >= 0)
	res.Notes = append(res.Notes, name+" by key:")
	if len(lines) == 0 {
		lines = []string{"  (none)"}
	}
	res.Notes = append(res.Notes, lines...)
}

func judgeKill(r *run, calls []Call, res *Result) {
	judgeCommon(r, res)
	killed := CheckOvershoot(calls, r.opt.Uses, r.opt.Window, func(c Call) bool { return c.Start < r.restart })
	judgeLost(r, calls, killed, res, "crash: overshoot keys/max/total, calls before the restart", true)
	if p := r.crash; p != nil {
		cc := p.h.Calls()
		co := CheckOvershoot(cc, p.lc.Uses, p.lc.Window, nil)
		res.Crash = &co
		judgeLostUses(r, cc, co, res, fmt.Sprintf("crash keys (%d, full at the kill, %d per %v): overshoot keys/max/total", len(p.keys), p.lc.Uses, p.lc.Window), true, p.lc.Uses)
		after := 0
		for _, c := range cc {
			if c.Allowed && c.Start >= r.faultAt {
				after++
			}
		}
		res.check("calls to crash keys admitted after the kill", fmt.Sprintf("%d of %d calls", after, countFrom(cc, r.faultAt)), "reported", true, false)
		if err := WriteCSV(filepath.Join(res.LogDir, "crash-keys.csv"), cc); err != nil {
			r.logf("%v", err)
		}
	}
	// A restarted node is a joining node: the join promise (exact counts)
	// holds for every window from one before the restart on.
	back := CheckOvershoot(calls, r.opt.Uses, r.opt.Window, func(c Call) bool { return c.Start >= r.restart-r.opt.Window })
	res.check("restart: overshoot keys/max/total, calls from a window before it", fmt.Sprintf("%d/%d/%d", back.Keys, back.Max, back.Total), "0/0/0", back.Total == 0 && back.Max <= 0, true)
	keyNotes(r, res, "restart: overshoot by key:", back)
	conv := CheckConvergence(calls, r.faultAt, r.changed)
	res.Convergence = &conv
	got := fmt.Sprintf("%d/%d keys, max %.2fs", conv.Converged, conv.Keys, conv.Max.Seconds())
	if conv.MaxKey != "" {
		got += " (" + conv.MaxKey + ")"
	}
	res.check("convergence to the new owner", got, "all keys, < 3s", conv.Keys > 0 && conv.Converged == conv.Keys && conv.Max < 3*time.Second, true)
	judgeProbe(res, false)
}

func judgeStop(r *run, calls []Call, res *Result) {
	judgeCommon(r, res)
	o := res.Overshoot
	res.check("overshoot keys/max/total (all nodes)", fmt.Sprintf("%d/%d/%d", o.Keys, o.Max, o.Total), "reported", true, false)
	keyNotes(r, res, "overshoot by key:", o)
	judgeProbe(res, false)
}

func judgePartition(r *run, calls []Call, res *Result) {
	judgeCommon(r, res)
	x := r.target
	majOwn := func(c Call) bool { return c.Node != x && r.owners[c.Key] != x }
	// The owners' count is exact. A call the majority's fallback decided
	// (its owner, though reachable, did not answer within Timeout: a
	// starved machine) is the local policy's, held to its own bound below.
	maj := CheckOvershoot(calls, r.opt.Uses, r.opt.Window, func(c Call) bool { return majOwn(c) && c.Fallback == "" })
	res.check("majority, keys it owned, owners' verdicts: overshoot keys/max/total", fmt.Sprintf("%d/%d/%d", maj.Keys, maj.Max, maj.Total), "0/0/0", maj.Total == 0 && maj.Max <= 0, true)
	keyNotes(r, res, "majority, keys it owned, owners' verdicts: overshoot by key:", maj)
	judgeShares(r, calls, res, "majority, keys it owned", majOwn)
	all := CheckOvershoot(calls, r.opt.Uses, r.opt.Window, majOwn)
	res.check("majority, keys it owned, all verdicts: overshoot keys/max/total", fmt.Sprintf("%d/%d/%d", all.Keys, all.Max, all.Total), "reported (owners + fallback)", true, false)
	keyNotes(r, res, "majority, keys it owned, all verdicts: overshoot by key:", all)
	majX := CheckOvershoot(calls, r.opt.Uses, r.opt.Window, func(c Call) bool { return c.Node != x && r.owners[c.Key] == x })
	judgeLost(r, calls, majX, res, "majority, keys "+x+" owned: overshoot keys/max/total", true)
	judgeClaims(r, res)
	mino := CheckOvershoot(calls, r.opt.Uses, r.opt.Window, func(c Call) bool { return c.Node == x && c.Start >= r.faultAt && c.Start <= r.healAt })
	keyNotes(r, res, "minority ("+x+") overshoot by key:", mino)
	res.check("minority ("+x+", "+res.Fallback+"), calls during the cut: overshoot keys/max/total", fmt.Sprintf("%d/%d/%d", mino.Keys, mino.Max, mino.Total), "0/0/0 (at most the limit)", mino.Total == 0 && mino.Max <= 0, res.Fallback != "allow")
	healed := CheckOvershoot(calls, r.opt.Uses, r.opt.Window, func(c Call) bool { return c.Start >= r.healAt })
	res.check("after healing, all nodes: overshoot keys/max/total", fmt.Sprintf("%d/%d/%d", healed.Keys, healed.Max, healed.Total), "reported (sides merge)", true, false)
	keyNotes(r, res, "after healing: overshoot by key:", healed)
	o := res.Overshoot
	res.check("whole run, all nodes: overshoot keys/max/total", fmt.Sprintf("%d/%d/%d", o.Keys, o.Max, o.Total), "reported", true, false)
	res.check("membership converged after healing", fmt.Sprintf("%.2fs", r.healConv.Seconds()), "all see all", r.healConv > 0, true)
	judgeProbe(res, true)
}

// judgeShares holds the admissions the fallback decided (Call.Fallback)
// among the calls include selects to the local policy's contract: each
// node counts them in a store of its own under its share of the limit,
// ceil(uses/m) for the m members of the ring it routes by. That ring holds
// a majority of the members it knows (a node that sees no majority routes
// by all of them), so m >= nodes/2+1 and no node admits more than
// ceil(uses/(nodes/2+1)) per window this way. Only the local policy has
// such a bound: under deny the fallback admits nothing, under allow
// everything.
func judgeShares(r *run, calls []Call, res *Result, what string, include func(Call) bool) {
	name := what + ", fallback's verdicts: overshoot of each node's share, keys/max/total"
	var share int
	switch res.Fallback {
	case "local":
		quorum := res.Nodes/2 + 1
		share = (r.opt.Uses + quorum - 1) / quorum
	case "deny":
		share = 0
	default:
		res.check(name, "-", "reported (allow fallback: no bound)", true, false)
		return
	}
	var sum Overshoot
	var lines []string
	fellBack := 0
	for _, p := range r.c.Procs {
		o := CheckOvershoot(calls, share, r.opt.Window, func(c Call) bool {
			return c.Node == p.Name && c.Fallback != "" && include(c)
		})
		sum.Keys += o.Keys
		sum.Total += o.Total
		sum.Max = max(sum.Max, o.Max)
		for _, k := range sortedKeys(o.ByKey) {
			ko := o.ByKey[k]
			lines = append(lines, fmt.Sprintf("  %-8s via %-3s owner %-3s over the share by max %d (window from %.2fs) total %d of %d admitted by the fallback", k, p.Name, r.owners[k], ko.Max, ko.MaxAt.Seconds(), ko.Total, ko.Admitted))
		}
	}
	for _, c := range calls {
		if c.Fallback != "" && c.Answered && c.Allowed && include(c) {
			fellBack++
		}
	}
	got := fmt.Sprintf("%d/%d/%d (%d admitted by the fallback)", sum.Keys, sum.Max, sum.Total, fellBack)
	res.check(name, got, fmt.Sprintf("0/0/0 (at most %d per node and window)", share), sum.Total == 0 && sum.Max <= 0, true)
	if len(lines) > 0 {
		res.Notes = append(res.Notes, what+", fallback's verdicts over a node's share, by key:")
		res.Notes = append(res.Notes, lines...)
	}
}

func sortedKeys(m map[string]KeyOvershoot) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// keyNotes adds one note line per overshooting key.
func keyNotes(r *run, res *Result, title string, o Overshoot) {
	if o.Keys == 0 {
		return
	}
	res.Notes = append(res.Notes, title)
	keys := make([]string, 0, len(o.ByKey))
	for k := range o.ByKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ko := o.ByKey[k]
		res.Notes = append(res.Notes, fmt.Sprintf("  %-8s owner %-3s overshoot max %d (window from %.2fs) total %d of %d admitted", k, r.owners[k], ko.Max, ko.MaxAt.Seconds(), ko.Total, ko.Admitted))
	}
}

func kinds(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	ks := make([]string, 0, len(m))
	for k, v := range m {
		ks = append(ks, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(ks)
	return " (" + strings.Join(ks, ", ") + ")"
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// countFrom counts the calls that started at or after from.
func countFrom(calls []Call, from time.Duration) int {
	n := 0
	for _, c := range calls {
		if c.Start >= from {
			n++
		}
	}
	return n
}
