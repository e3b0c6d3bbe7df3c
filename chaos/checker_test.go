package chaos

import (
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

func adm(key, node string, start, end time.Duration) Call {
	return Call{Key: key, Node: node, Start: start, End: end, Answered: true, Allowed: true}
}

func TestOvershootCaught(t *testing.T) {
	// Limit 3 per 1 s. Five admissions within 500 ms: 2 beyond.
	var h []Call
	for i := range 5 {
		h = append(h, adm("k", "a", time.Duration(i)*100*ms, time.Duration(i)*100*ms+ms))
	}
	o := CheckOvershoot(h, 3, time.Second, nil)
	if o.Keys != 1 || o.Max != 2 || o.Total != 2 || o.MaxKey != "k" {
		t.Fatalf("overshoot = %+v, want 1 key, max 2, total 2", o)
	}
}

func TestOvershootAcrossWindows(t *testing.T) {
	// Limit 2 per 1 s. Two bursts of 4, 3 s apart: max 2, total 4.
	var h []Call
	for _, base := range []time.Duration{0, 3 * time.Second} {
		for i := range 4 {
			s := base + time.Duration(i)*10*ms
			h = append(h, adm("k", "a", s, s+ms))
		}
	}
	// Refused calls and another key never count.
	h = append(h, Call{Key: "k", Start: 20 * ms, End: 21 * ms, Answered: true})
	h = append(h, adm("other", "a", 0, ms))
	o := CheckOvershoot(h, 2, time.Second, nil)
	if o.Keys != 1 || o.Max != 2 || o.Total != 4 {
		t.Fatalf("overshoot = %+v, want 1 key, max 2, total 4", o)
	}
	if at := o.ByKey["k"].MaxAt; at != 0 {
		t.Fatalf("MaxAt = %v, want 0 (the first burst)", at)
	}
	if got := o.ByKey["k"]; got.Admitted != 8 {
		t.Fatalf("admitted = %d, want 8", got.Admitted)
	}
}

func TestOvershootSlidingNotFixed(t *testing.T) {
	// Limit 2 per 1 s: 2 admissions at 0.9 s and 2 at 1.1 s fit in one
	// sliding window though they straddle a fixed boundary.
	h := []Call{
		adm("k", "a", 900*ms, 901*ms), adm("k", "b", 910*ms, 911*ms),
		adm("k", "a", 1100*ms, 1101*ms), adm("k", "b", 1110*ms, 1111*ms),
	}
	if o := CheckOvershoot(h, 2, time.Second, nil); o.Max != 2 || o.Total != 2 {
		t.Fatalf("overshoot = %+v, want max 2 total 2", o)
	}
}

func TestOvershootConservative(t *testing.T) {
	// Limit 2 per 1 s. A correct limiter: uses at 0 and 10 ms, the third
	// decided just after 1 s. Its call started at 500 ms and its answer
	// came late (1.2 s): the intervals span more than a window, so no
	// overshoot is claimed.
	h := []Call{adm("k", "a", 0, ms), adm("k", "a", 10*ms, 11*ms), adm("k", "a", 500*ms, 1200*ms)}
	if o := CheckOvershoot(h, 2, time.Second, nil); o.Keys != 0 {
		t.Fatalf("overshoot = %+v, want none", o)
	}
	// Exactly one window apart is not in one window (ages < window count).
	h = []Call{adm("k", "a", 0, ms), adm("k", "a", 10*ms, 11*ms), adm("k", "a", 999*ms, 1000*ms)}
	if o := CheckOvershoot(h, 2, time.Second, nil); o.Keys != 0 {
		t.Fatalf("overshoot = %+v, want none at End-Start == window", o)
	}
	h[2] = adm("k", "a", 999*ms, 999*ms+999*time.Microsecond)
	if o := CheckOvershoot(h, 2, time.Second, nil); o.Max != 1 {
		t.Fatalf("overshoot = %+v, want max 1 just inside the window", o)
	}
}

func TestOvershootFilter(t *testing.T) {
	h := []Call{adm("k", "a", 0, ms), adm("k", "b", ms, 2*ms), adm("k", "a", 2*ms, 3*ms)}
	if o := CheckOvershoot(h, 2, time.Second, nil); o.Max != 1 {
		t.Fatalf("all nodes: %+v, want max 1", o)
	}
	if o := CheckOvershoot(h, 2, time.Second, func(c Call) bool { return c.Node == "a" }); o.Keys != 0 {
		t.Fatalf("node a only: %+v, want none", o)
	}
}

func TestCheckCatchesTimeoutsAndErrors(t *testing.T) {
	spec := Spec{Uses: 5, Window: time.Second, Deadline: 350 * ms, Faults: []Fault{
		{Kind: "kill", Node: "dead", From: time.Second, To: 3 * time.Second, Excused: true},
		{Kind: "partition", Node: "cut", From: time.Second, To: 3 * time.Second},
	}}
	h := []Call{
		adm("k", "a", 0, ms),
		{Key: "k", Node: "a", Start: 0, End: 400 * ms, Answered: true},                                            // answered late
		{Key: "k", Node: "b", Start: 0, End: 350 * ms, Err: "DeadlineExceeded", Msg: "context deadline exceeded"}, // unanswered
		{Key: "k", Node: "b", Start: 0, End: 2 * ms, Err: "Unavailable", Msg: "no owner"},                         // error in time
		{Key: "k", Node: "dead", Start: 2 * time.Second, End: 2*time.Second + 350*ms, Err: "DeadlineExceeded"},    // excused
		{Key: "k", Node: "dead", Start: 500 * ms, End: 1100 * ms, Err: "Unavailable"},                             // overlaps the fault: excused
		{Key: "k", Node: "cut", Start: 2 * time.Second, End: 2*time.Second + 350*ms, Err: "DeadlineExceeded"},     // partition does not excuse
	}
	r := Check(h, spec)
	if r.Calls != 7 || r.Answered != 2 || r.Allowed != 1 || r.Excused != 2 {
		t.Fatalf("counts = %+v", r)
	}
	if r.Unanswered != 3 {
		t.Fatalf("unanswered = %d, want 3 (late verdict, deadline, partitioned node)", r.Unanswered)
	}
	if r.Errors["DeadlineExceeded"] != 2 || r.Errors["Unavailable"] != 1 || !strings.HasSuffix(r.ErrorSample["Unavailable"], "no owner") {
		t.Fatalf("errors = %v %v", r.Errors, r.ErrorSample)
	}
	if r.ExcusedErrors["DeadlineExceeded"] != 1 || r.ExcusedErrors["Unavailable"] != 1 {
		t.Fatalf("excused errors = %v", r.ExcusedErrors)
	}
	if r.Max != 400*ms {
		t.Fatalf("max latency = %v", r.Max)
	}
}

func TestCheckStall(t *testing.T) {
	h := []Call{
		{Key: "k", Node: "a", Start: 0, End: 500 * ms, Answered: true},
		{Key: "k", Node: "a", Start: 2 * time.Second, End: 2*time.Second + 500*ms, Answered: true},
	}
	r := Check(h, Spec{Deadline: 350 * ms, Stalls: []Fault{{Kind: "stall", From: 100 * ms, To: 400 * ms}}})
	if r.Unanswered != 1 || r.UnansweredInStall != 1 || r.LongestStall != 300*ms {
		t.Fatalf("stall: %+v, want 1 unanswered, 1 in a 300ms stall", r)
	}
}

func TestCheckCleanHistory(t *testing.T) {
	h := []Call{adm("k", "a", 0, ms), {Key: "k", Node: "b", Start: ms, End: 2 * ms, Answered: true}}
	r := Check(h, Spec{Uses: 1, Window: time.Second, Deadline: 350 * ms})
	if r.Unanswered != 0 || len(r.Errors) != 0 || r.Answered != 2 {
		t.Fatalf("clean history: %+v", r)
	}
}

func TestAdmittedAround(t *testing.T) {
	h := []Call{adm("k", "a", 0, ms), adm("k", "a", 940*ms, 950*ms), adm("k", "a", 990*ms, 1010*ms), adm("k", "a", 1020*ms, 1030*ms), adm("j", "a", 990*ms, 991*ms)}
	if n := AdmittedAround(h, "k", time.Second, 50*ms); n != 2 {
		t.Fatalf("AdmittedAround = %d, want 2", n)
	}
}

func TestConvergence(t *testing.T) {
	changed := map[string]map[string]time.Duration{
		"a": {"k": 1200 * ms, "slow": 1200 * ms},
		"b": {"k": 1300 * ms, "slow": 1300 * ms},
	}
	h := []Call{
		{Key: "k", Node: "a", Start: 1100 * ms, End: 1101 * ms, Answered: true}, // before a's change
		{Key: "k", Node: "a", Start: 1250 * ms, End: 1251 * ms, Answered: true},
		{Key: "k", Node: "b", Start: 1400 * ms, End: 1402 * ms, Answered: true},
		{Key: "slow", Node: "a", Start: 1250 * ms, End: 1251 * ms, Answered: true},
		{Key: "slow", Node: "b", Start: 5 * time.Second, End: 5*time.Second + ms, Err: "Unavailable"}, // not an answer
	}
	c := CheckConvergence(h, time.Second, changed)
	if c.Keys != 2 || c.Converged != 1 || c.ByKey["k"] != 402*ms || c.Max != 402*ms {
		t.Fatalf("convergence = %+v, want k at 402ms and slow not converged", c)
	}
	h = append(h, Call{Key: "slow", Node: "b", Start: 5 * time.Second, End: 5*time.Second + ms, Answered: true})
	if c := CheckConvergence(h, time.Second, changed); c.Converged != 2 || c.MaxKey != "slow" || c.Max != 4*time.Second+ms {
		t.Fatalf("convergence = %+v, want slow at 4.001s", c)
	}
}

func TestProbe(t *testing.T) {
	seq := func(key string, verdicts ...bool) []Call {
		var out []Call
		for i, v := range verdicts {
			out = append(out, Call{Key: key, Start: time.Duration(i) * ms, End: time.Duration(i)*ms + 1, Answered: true, Allowed: v})
		}
		return out
	}
	var h []Call
	h = append(h, seq("exact", true, true, false)...)
	h = append(h, seq("stuck", false, false, false)...)
	h = append(h, seq("over", true, true, true)...)
	h = append(h, seq("under", true, false, false)...)
	p := CheckProbe(h, 2)
	if p.Keys != 4 || p.Exact != 1 || p.Stuck != 1 || p.Over != 1 || p.Under != 1 {
		t.Fatalf("probe = %+v", p)
	}
}
