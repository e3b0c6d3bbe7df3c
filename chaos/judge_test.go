package chaos

import (
	"os"
	"strings"
	"testing"
	"time"
)

// partitionRun is a judged partition run: 5 nodes, n5 cut off from 1 s to
// 5 s, limit 20 per 2 s, local fallback; key "k" is owned by n1.
func partitionRun() (*run, *Result) {
	c := &Cluster{}
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		c.Procs = append(c.Procs, &Proc{Name: n})
	}
	r := &run{
		opt: Options{Uses: 20, Window: 2 * time.Second, ReplLag: 100 * ms}, c: c,
		target: "n5", faultAt: time.Second, healAt: 5 * time.Second, healConv: time.Second,
		owners: map[string]string{"k": "n1"},
	}
	res := &Result{Nodes: 5, Fallback: "local", Promise: true, Probe: Probe{Keys: 1, Exact: 1}}
	return r, res
}

func row(t *testing.T, res *Result, prefix string) Row {
	t.Helper()
	for _, ch := range res.Checks {
		if strings.HasPrefix(ch.Name, prefix) {
			return ch
		}
	}
	t.Fatalf("no row %q in %+v", prefix, res.Checks)
	return Row{}
}

// burst is n admissions of k through node, 10 ms apart from start, each
// decided by fallback ("" for the owner).
func burst(k, node, fallback string, start time.Duration, n int) []Call {
	var out []Call
	for i := range n {
		c := adm(k, node, start+time.Duration(i)*10*ms, start+time.Duration(i)*10*ms+2*ms)
		c.Fallback = fallback
		out = append(out, c)
	}
	return out
}

// The trace in CHAOS.md ("The partition scenario on a busy machine"): in
// one window the majority's owner admitted 20 uses of its key and one more
// call, sent through another majority node whose forward to that owner took
// longer than Timeout on the starved machine, was admitted by that node's
// local fallback. That is the local policy's share, not an owner counting
// wrong: the owners' row stays exact and the share row holds it. Judged
// over all verdicts, as before, the run broke ("1/1/1 ... BROKEN").
func TestPartitionFallbackVerdictIsTheLocalShare(t *testing.T) {
	r, res := partitionRun()
	calls := append(burst("k", "n2", "", 2*time.Second, 20), burst("k", "n3", "local", 2500*ms, 1)...)
	judgePartition(r, calls, res)
	for _, ch := range res.Checks {
		if ch.Promise && !ch.OK {
			t.Errorf("promise broken: %+v", ch)
		}
	}
	if o := row(t, res, "majority, keys it owned, owners' verdicts"); !o.OK || o.Got != "0/0/0" {
		t.Errorf("owners' row %+v, want 0/0/0 ok", o)
	}
	if s := row(t, res, "majority, keys it owned, fallback's verdicts"); !s.OK || !s.Promise {
		t.Errorf("share row %+v, want a kept promise", s)
	}
	if a := row(t, res, "majority, keys it owned, all verdicts"); a.Got != "1/1/1" || a.Promise {
		t.Errorf("all-verdicts row %+v, want 1/1/1 reported", a)
	}
	// What the judge did before: every admission through the majority
	// against the limit.
	if o := CheckOvershoot(calls, 20, 2*time.Second, func(c Call) bool { return c.Node != "n5" }); o.Total != 1 {
		t.Fatalf("the old row's overshoot %+v, want 1", o)
	}
}

// The split cannot hide an owner that counts wrong: 21 admissions decided
// by owners in one window break the promise.
func TestPartitionOwnersOvershootBreaks(t *testing.T) {
	r, res := partitionRun()
	calls := append(burst("k", "n2", "", 2*time.Second, 20), burst("k", "n3", "", 2500*ms, 1)...)
	judgePartition(r, calls, res)
	if o := row(t, res, "majority, keys it owned, owners' verdicts"); o.OK || !o.Promise || o.Got != "1/1/1" {
		t.Errorf("owners' row %+v, want 1/1/1 broken", o)
	}
}

// Nor a fallback beyond its share: with 5 nodes each majority node's local
// share is at most ceil(20/3) = 7 per window; 8 through one node break it,
// 7 through each of two nodes do not.
func TestPartitionFallbackBeyondShareBreaks(t *testing.T) {
	r, res := partitionRun()
	judgePartition(r, burst("k", "n3", "local", 2*time.Second, 8), res)
	if s := row(t, res, "majority, keys it owned, fallback's verdicts"); s.OK || !strings.HasPrefix(s.Got, "1/1/1") {
		t.Errorf("share row %+v, want 1/1/1 broken", s)
	}
	r, res = partitionRun()
	judgePartition(r, append(burst("k", "n3", "local", 2*time.Second, 7), burst("k", "n4", "local", 2*time.Second, 7)...), res)
	if s := row(t, res, "majority, keys it owned, fallback's verdicts"); !s.OK {
		t.Errorf("share row %+v, want ok (7 per node)", s)
	}
}

// The exact scenarios judge the same way.
func TestExactSplitsFallbackVerdicts(t *testing.T) {
	r, res := partitionRun()
	calls := append(burst("k", "n2", "", 2*time.Second, 20), burst("k", "n3", "local", 2500*ms, 1)...)
	res.Overshoot = CheckOvershoot(calls, 20, 2*time.Second, nil)
	judgeExact(r, calls, res)
	if o := row(t, res, "overshoot keys/max/total (all nodes, owners' verdicts)"); !o.OK {
		t.Errorf("owners' row %+v, want ok", o)
	}
	r, res = partitionRun()
	calls = burst("k", "n2", "", 2*time.Second, 21)
	judgeExact(r, calls, res)
	if o := row(t, res, "overshoot keys/max/total (all nodes, owners' verdicts)"); o.OK {
		t.Errorf("owners' row %+v, want broken", o)
	}
}

// A probe key whose last round met the fallback is not exact.
func TestProbeFallback(t *testing.T) {
	var h []Call
	for i := range 3 {
		c := Call{Key: "k", Start: time.Duration(i) * ms, End: time.Duration(i)*ms + 1, Answered: true, Allowed: i < 2}
		if i == 1 {
			c.Fallback = "local"
		}
		h = append(h, c)
	}
	if p := CheckProbe(h, 2); p.Fallback != 1 || p.Exact != 0 {
		t.Fatalf("probe = %+v, want the key counted under Fallback", p)
	}
}

// A node's "process stalled" lines become stalls of that node. A late call
// to it is reported apart when its node's stalls during it cover the
// node's margin beyond Timeout (100 ms) plus the call's lateness; a late
// call to another node at the same time is not excused by them, nor one
// whose node stalled for less.
func TestNodeStalls(t *testing.T) {
	origin := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h := NewHistory(origin)
	log := t.TempDir() + "/n3.log"
	lines := "==== chaos: start 1 at 2026-12-01T09:59:59Z: ringlimit serve --log-stalls 50ms\n" +
		`time=2026-12-01T10:00:02.300Z level=WARN msg="ringlimit: process stalled" since=2026-12-01T10:00:02.2Z for=180ms` + "\n" +
		`time=2026-12-01T10:00:03.000Z level=INFO msg="ringlimit: trace" key=hot-1 event="local [n1 n2 n3]"` + "\n"
	if err := os.WriteFile(log, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	stalls, err := NodeStalls(h, "n3", log)
	if err != nil {
		t.Fatal(err)
	}
	if len(stalls) != 1 || stalls[0].Node != "n3" || stalls[0].From != 2200*ms || stalls[0].To != 2380*ms {
		t.Fatalf("stalls %+v, want n3 2.2s..2.38s", stalls)
	}
	late := func(node string) Call {
		return Call{Key: "k", Node: node, Start: 2100 * ms, End: 2500 * ms, Err: "DeadlineExceeded"}
	}
	// 400 ms: 50 ms late, + the 100 ms margin = 150 ms needed; n3 stalled
	// 180 ms of it.
	r := Check([]Call{late("n3"), late("n1")}, Spec{Deadline: 350 * ms, Timeout: 250 * ms, Stalls: stalls})
	if r.Unanswered != 1 || r.UnansweredInStall != 1 {
		t.Fatalf("report %+v, want the call to n3 excused and the one to n1 not", r)
	}
	short := []Fault{{Kind: "stall", Node: "n3", From: 2200 * ms, To: 2340 * ms}} // 140 ms < 150 ms
	if r := Check([]Call{late("n3")}, Spec{Deadline: 350 * ms, Timeout: 250 * ms, Stalls: short}); r.Unanswered != 1 {
		t.Fatalf("report %+v, want a call whose node stalled 140 ms of the 150 ms it needed not excused", r)
	}
	two := []Fault{{Kind: "stall", Node: "n3", From: 2100 * ms, To: 2180 * ms}, {Kind: "stall", Node: "n3", From: 2300 * ms, To: 2380 * ms}}
	if r := Check([]Call{late("n3")}, Spec{Deadline: 350 * ms, Timeout: 250 * ms, Stalls: two}); r.UnansweredInStall != 1 {
		t.Fatalf("report %+v, want two stalls of 80 ms (160 >= 150) to excuse it", r)
	}
}
