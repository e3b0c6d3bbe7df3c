package chaos

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Spec is what a history is judged against.
type Spec struct {
	// Uses and Window are the sliding-log limit every load call used.
	Uses   int
	Window time.Duration
	// Deadline is the longest a call may take to be answered: the node's
	// Timeout + 100 ms. The load's clients use it as their deadline.
	Deadline time.Duration
	// Timeout is the nodes' --timeout (0: Deadline), for the margin a node
	// has beyond it (see stalled).
	Timeout time.Duration
	// Faults excuse calls to disturbed nodes (see Fault.Excused).
	Faults []Fault
	// Stalls are intervals when the harness itself (StallMonitor; Node "")
	// or a node (NodeStalls) was not scheduled; late calls overlapping one
	// of the harness, or whose node's stalls cover their lateness (see
	// stalled), are counted apart.
	Stalls []Fault
}

// Report is the checker's account of one history: calls, answers, errors
// and latency. Calls to a node under an excused fault are counted apart
// and held to nothing.
type Report struct {
	// Calls made; Answered with a verdict; Allowed among them.
	Calls, Answered, Allowed int
	// Excused: calls to a node under an excused fault (killed, stopped,
	// shutting down), with their errors by kind in ExcusedErrors.
	Excused       int
	ExcusedErrors map[string]int
	// Unanswered: calls (not excused) with no verdict within Deadline:
	// DeadlineExceeded/Canceled errors, or a verdict later than Deadline.
	// Must be 0. UnansweredInStall: late calls (not in Unanswered) whose
	// interval overlapped a stall of the harness or of the node they were
	// sent to, with the longest stall in LongestStall: reported, not held
	// against the cluster.
	Unanswered, UnansweredInStall int
	LongestStall                  time.Duration
	// Errors: calls (not excused) answered with an error, by kind
	// (DeadlineExceeded included); ErrorSample holds the first call of each kind.
	Errors      map[string]int
	ErrorSample map[string]string
	// P50, P99 and Max latency of the answered calls that were not excused.
	P50, P99, Max time.Duration
}

// Check counts calls, answers, errors and unanswered calls.
func Check(calls []Call, spec Spec) Report {
	r := Report{ExcusedErrors: map[string]int{}, Errors: map[string]int{}, ErrorSample: map[string]string{}}
	var lat []time.Duration
	for _, c := range calls {
		r.Calls++
		if c.Answered {
			r.Answered++
			if c.Allowed {
				r.Allowed++
			}
		}
		if excused(c, spec.Faults) {
			r.Excused++
			if !c.Answered {
				r.ExcusedErrors[c.Err]++
			}
			continue
		}
		if !c.Answered {
			r.Errors[c.Err]++
			if _, ok := r.ErrorSample[c.Err]; !ok {
				r.ErrorSample[c.Err] = fmt.Sprintf("%s via %s at %.3fs after %v: %s", c.Key, c.Node, c.Start.Seconds(), c.Latency().Round(time.Millisecond), c.Msg)
			}
		}
		if late(c, spec.Deadline) {
			if stalled(c, spec.Stalls, spec.Deadline, spec.Timeout) {
				r.UnansweredInStall++
			} else {
				r.Unanswered++
			}
		}
		if c.Answered {
			lat = append(lat, c.Latency())
		}
	}
	for _, s := range spec.Stalls {
		r.LongestStall = max(r.LongestStall, s.To-s.From)
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		r.P50 = lat[len(lat)/2]
		r.P99 = lat[len(lat)*99/100]
		r.Max = lat[len(lat)-1]
	}
	return r
}

// late reports whether c had no verdict within the deadline.
func late(c Call, deadline time.Duration) bool {
	if !c.Answered && (c.Err == "DeadlineExceeded" || c.Err == "Canceled") {
		return true
	}
	return c.Latency() > deadline
}

// KeyOvershoot is one key's admissions beyond its limit.
type KeyOvershoot struct {
	// Admitted is the key's admissions counted.
	Admitted int
	// Max is the largest number of admissions beyond the limit inside one
	// window; Total the fewest admissions that must be removed so that no
	// window holds more than the limit.
	Max, Total int
	// MaxAt is the Start of the earliest admission of the fullest window.
	MaxAt time.Duration
}

// Overshoot sums KeyOvershoot over the keys.
type Overshoot struct {
	// Keys is how many keys overshot at all.
	Keys int
	// Max is the largest KeyOvershoot.Max, on MaxKey; Total the sum of
	// KeyOvershoot.Total.
	Max    int
	MaxKey string
	Total  int
	// ByKey holds the keys that overshot.
	ByKey map[string]KeyOvershoot
}

// CheckOvershoot finds admissions beyond a sliding-log limit of uses per
// window, judged conservatively from client-side times. Only allowed calls
// for which include returns true count (nil: all).
//
// "In one window": the owner decided each admission at some instant of its
// [Start, End] interval, and a sliding log admits a call only when fewer than
// uses admissions are younger than window. A set of admissions certainly
// lies in one window when max(End) - min(Start) < window: wherever inside
// their intervals the decisions fell, they span less than a window, so at
// most uses of them can be admitted by a correct limiter. Admissions whose
// intervals merely might share a window are never counted against it, so a
// slow call can hide an overshoot but never invent one.
//
// Max is, over every half-open interval [x, x+window), the admissions wholly
// inside it minus uses (it suffices to try x at every admission's Start).
// Total scans admissions by End and counts an admission as excess when uses
// earlier-ending admissions already kept started after its End - window
// (then all of them and it fit in one window); otherwise it is kept. The
// kept admissions never overfill a window, and Total >= Max.
func CheckOvershoot(calls []Call, uses int, window time.Duration, include func(Call) bool) Overshoot {
	return overshootByKey(calls, include, func(adm []Call) KeyOvershoot { return keyOvershoot(adm, uses, window) })
}

// overshootByKey groups the answered admissions include keeps by key and
// sums what perKey finds in each.
func overshootByKey(calls []Call, include func(Call) bool, perKey func([]Call) KeyOvershoot) Overshoot {
	byKey := map[string][]Call{}
	for _, c := range calls {
		if c.Answered && c.Allowed && (include == nil || include(c)) {
			byKey[c.Key] = append(byKey[c.Key], c)
		}
	}
	out := Overshoot{ByKey: map[string]KeyOvershoot{}}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ko := perKey(byKey[k])
		if ko.Max <= 0 && ko.Total == 0 {
			continue
		}
		out.Keys++
		out.Total += ko.Total
		if ko.Max > out.Max {
			out.Max, out.MaxKey = ko.Max, k
		}
		out.ByKey[k] = ko
	}
	return out
}

func keyOvershoot(adm []Call, uses int, window time.Duration) KeyOvershoot {
	ko := KeyOvershoot{Admitted: len(adm)}
	// Max: anchor windows at every Start.
	sort.Slice(adm, func(i, j int) bool { return adm[i].Start < adm[j].Start })
	first := 0
	for i := range adm {
		if adm[i].Start != adm[first].Start {
			first = i
		}
		end := adm[i].Start + window
		n := 0
		for j := first; j < len(adm) && adm[j].Start < end; j++ {
			if adm[j].End < end {
				n++
			}
		}
		if n-uses > ko.Max {
			ko.Max, ko.MaxAt = n-uses, adm[i].Start
		}
	}
	// Total: greedy by End.
	sort.Slice(adm, func(i, j int) bool { return adm[i].End < adm[j].End })
	var kept []Call
	for _, a := range adm {
		from := a.End - window
		n := 0
		for j := len(kept) - 1; j >= 0 && kept[j].End > from; j-- {
			if kept[j].Start > from {
				n++
			}
		}
		if a.Start > from && n >= uses {
			ko.Total++
			continue
		}
		kept = append(kept, a)
	}
	return ko
}

// AdmittedAround counts key's admissions whose interval reaches into
// [at-before, at]: the admissions an owner killed at offset at may have made
// without replicating them, when its replication lags at most before.
func AdmittedAround(calls []Call, key string, at, before time.Duration) int {
	n := 0
	for _, c := range calls {
		if c.Key == key && c.Answered && c.Allowed && c.End >= at-before && c.Start <= at {
			n++
		}
	}
	return n
}

// Convergence is how long after a fault the cluster answered a moved key
// from its new owner through every node.
type Convergence struct {
	// Keys watched; Converged among them.
	Keys, Converged int
	// Max is the slowest converged key's time from the fault, on MaxKey.
	Max    time.Duration
	MaxKey string
	// ByKey is each converged key's time from the fault.
	ByKey map[string]time.Duration
}

// CheckConvergence measures, for each key in changed (node -> key ->
// offset at which that node's Owner answer for the key moved off the failed
// owner), the time from the fault until every node in changed had answered a
// call for the key that it received at or after its own change. A key with
// a node that never did is not converged.
func CheckConvergence(calls []Call, fault time.Duration, changed map[string]map[string]time.Duration) Convergence {
	keys := map[string]bool{}
	for _, ks := range changed {
		for k := range ks {
			keys[k] = true
		}
	}
	out := Convergence{Keys: len(keys), ByKey: map[string]time.Duration{}}
	for k := range keys {
		var worst time.Duration
		ok := true
		for node, ks := range changed {
			at, watched := ks[k]
			if !watched {
				ok = false
				break
			}
			first := time.Duration(-1)
			for _, c := range calls {
				if c.Key == k && c.Node == node && c.Answered && c.Start >= at && (first < 0 || c.End < first) {
					first = c.End
				}
			}
			if first < 0 {
				ok = false
				break
			}
			worst = max(worst, first-fault)
		}
		if !ok {
			continue
		}
		out.Converged++
		out.ByKey[k] = worst
		if worst > out.Max || out.MaxKey == "" {
			out.Max, out.MaxKey = worst, k
		}
	}
	return out
}

// Probe is the result of the exactness probe: after the load stopped and a
// whole window passed, uses+1 sequential calls per sampled key, spread over
// the live nodes. A converged cluster admits exactly uses of them.
type Probe struct {
	// Keys probed; Exact admitted exactly uses then refused.
	Keys, Exact int
	// Fallback: a call of the key's last round was decided by the failure
	// policy or not answered within the deadline (Cluster.Probe asks again
	// about such keys, so this is a key whose owner did not answer in time
	// round after round). Stuck: the
	// first call was refused or failed (a key stuck refusing). Over: more
	// than uses admitted. Under: some of the first uses refused or failed
	// after the first passed.
	Fallback, Stuck, Over, Under int
	// Bad lists the keys that were not exact.
	Bad []string
}

// CheckProbe judges probe calls (each key's calls in Start order).
func CheckProbe(calls []Call, uses int) Probe {
	byKey := map[string][]Call{}
	var keys []string
	for _, c := range calls {
		if _, ok := byKey[c.Key]; !ok {
			keys = append(keys, c.Key)
		}
		byKey[c.Key] = append(byKey[c.Key], c)
	}
	sort.Strings(keys)
	p := Probe{Keys: len(keys)}
	for _, k := range keys {
		cs := byKey[k]
		sort.Slice(cs, func(i, j int) bool { return cs[i].Start < cs[j].Start })
		allowed := 0
		for _, c := range cs {
			if c.Answered && c.Allowed {
				allowed++
			}
		}
		fellBack := slices.ContainsFunc(cs, undecided)
		switch {
		case fellBack:
			p.Fallback++
		case len(cs) == 0 || !cs[0].Answered || !cs[0].Allowed:
			p.Stuck++
		case allowed > uses:
			p.Over++
		case allowed < uses || len(cs) <= uses || !cs[uses].Answered || cs[uses].Allowed:
			p.Under++
		default:
			p.Exact++
			continue
		}
		p.Bad = append(p.Bad, k)
	}
	return p
}
