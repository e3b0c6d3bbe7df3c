package sim

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/ringlimit/ringlimit/chaos"
)

// Check is a history judged by chaos's checker, each admission held to
// the promise that applies when it was made:
//
//   - exact (overshoot 0) while membership is stable and through joins,
//     graceful leaves, slow nodes, lost, late and repeated messages and
//     clocks up to 1% off: every admission whose interval lies outside
//     the disturbance of a crash or a partition (below);
//   - a crash may lose what its node admitted and had not yet replicated:
//     each key's overshoot is at most its admissions within the crashed
//     node's replication lag before the crash (chaos.AdmittedAround);
//   - a partition is a crash from the majority's side, and the cut-off
//     node counts its own keys on (the deny policy refuses the rest): a
//     key may go over by its admissions within the lag before the cut,
//     plus its limit for every window the cut lasts.
//
// A crash disturbs [at - lag, at + window]: a window holding an
// admission the crash lost ends by then. A partition disturbs [at - lag,
// healed + the slowest view's catching up + window].
type Check struct {
	// Calls made (per key of a batch), Admitted among them, Errors
	// (answered by the deny policy, or killed with their node).
	Calls, Admitted, Errors int
	// MaxExact is the largest overshoot in one window among admissions
	// held to exactness (must be 0). MaxBound is the largest overshoot
	// (total per key) judged against a crash's or a partition's bound.
	MaxExact, MaxBound int
	// Failures describe the broken promises; Key and At locate the first.
	Failures []string
	Key      string
	At       time.Duration
}

// window the checker judges by: a node whose clock runs 1% fast ends its
// windows early in virtual time, and ages travel between clocks 2% apart
// at worst, so a window is judged 3% shorter (never inventing overshoot).
func judgedWindow(w time.Duration) time.Duration { return w * 97 / 100 }

type span struct{ from, to time.Duration }

func (s span) overlaps(c chaos.Call) bool { return c.End >= s.from && c.Start <= s.to }

func check(p Plan, calls []chaos.Call, evs []Event, buckets bool) Check {
	var out Check
	for _, c := range calls {
		out.Calls++
		if c.Allowed {
			out.Admitted++
		}
		if c.Err != "" {
			out.Errors++
		}
	}
	end := p.Load + p.Settle
	w := judgedWindow(p.Window)
	settle := p.Member.DetectMax + p.Member.LearnMax + p.Member.ProbeMax
	var disturbed []span
	allowance := map[string]int{}
	bounded := false
	for _, ev := range evs {
		switch ev.Kind {
		case Crash:
			bounded = true
			disturbed = append(disturbed, span{ev.From - ev.Lag, ev.From + p.Window + 10*time.Millisecond})
			for _, k := range p.Keys {
				allowance[k] += chaos.AdmittedAround(calls, k, ev.From, ev.Lag)
			}
		case Partition, OneWay:
			bounded = true
			to := ev.To
			if to == 0 {
				to = end
			}
			to += settle + p.Window
			disturbed = append(disturbed, span{ev.From - ev.Lag, to})
			windows := int(math.Ceil(float64(to-ev.From)/float64(w))) + 1
			for _, k := range p.Keys {
				allowance[k] += chaos.AdmittedAround(calls, k, ev.From, ev.Lag) + p.Uses*windows*len(ev.Nodes)
			}
		}
	}
	fail := func(key string, at time.Duration, format string, args ...any) {
		if len(out.Failures) == 0 {
			out.Key, out.At = key, at
		}
		out.Failures = append(out.Failures, fmt.Sprintf(format, args...))
	}
	overshoot := chaos.CheckOvershoot
	if buckets {
		// Options.Buckets: a bucket of capacity Uses refilled at Uses per
		// window.
		overshoot = func(calls []chaos.Call, uses int, window time.Duration, include func(chaos.Call) bool) chaos.Overshoot {
			return chaos.CheckBucketOvershoot(calls, uses, uses, window, include)
		}
	}
	exact := overshoot(calls, p.Uses, w, func(c chaos.Call) bool {
		for _, s := range disturbed {
			if s.overlaps(c) {
				return false
			}
		}
		return true
	})
	out.MaxExact = max(exact.Max, 0)
	for _, k := range sortedKeys(exact.ByKey) {
		ko := exact.ByKey[k]
		fail(k, ko.MaxAt, "exact: key %s admitted %d beyond its limit of %d in one window (from %.3fs; %d in all beyond)", k, ko.Max, p.Uses, ko.MaxAt.Seconds(), ko.Total)
	}
	if bounded {
		all := overshoot(calls, p.Uses, w, nil)
		for _, k := range sortedKeys(all.ByKey) {
			ko := all.ByKey[k]
			out.MaxBound = max(out.MaxBound, ko.Total)
			if ko.Total > allowance[k] {
				fail(k, ko.MaxAt, "bound: key %s admitted %d beyond its limit in all, more than the %d its crashes and partitions allow (fullest window from %.3fs)", k, ko.Total, allowance[k], ko.MaxAt.Seconds())
			}
		}
	}
	return out
}

func sortedKeys(m map[string]chaos.KeyOvershoot) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// First is the first broken promise ("" when none).
func (c Check) First() string {
	if len(c.Failures) == 0 {
		return ""
	}
	return c.Failures[0]
}
