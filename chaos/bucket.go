package chaos

import (
	"slices"
	"sort"
	"time"
)

// CheckBucketOvershoot is CheckOvershoot for a token bucket of capacity
// refilled at uses per window: a bucket admits, in any span of length d,
// at most capacity + d*uses/window (whatever its level at the start).
// Judged from client-side times as the log's check is: admissions
// certainly inside [s, t] are those whose whole interval is, and window is
// the judged one (shorter: refill is credited faster, never inventing
// overshoot).
//
// Max is, over spans from an admission's Start to another's End, the
// admissions wholly inside minus the bound; Total scans admissions by End
// and counts one as excess when the kept ones and it overfill some span
// ending at its End.
func CheckBucketOvershoot(calls []Call, capacity, uses int, window time.Duration, include func(Call) bool) Overshoot {
	return overshootByKey(calls, include, func(adm []Call) KeyOvershoot { return keyBucketOvershoot(adm, capacity, uses, window) })
}

// bucketBound is what a bucket of capacity refilled at uses per window
// admits at most within a span of length d.
func bucketBound(d time.Duration, capacity, uses int, window time.Duration) int {
	if d < 0 {
		return capacity
	}
	return capacity + int(int64(d)*int64(uses)/int64(window))
}

func keyBucketOvershoot(adm []Call, capacity, uses int, window time.Duration) KeyOvershoot {
	ko := KeyOvershoot{Admitted: len(adm)}
	sort.Slice(adm, func(i, j int) bool { return adm[i].Start < adm[j].Start })
	ends := make([]time.Duration, 0, len(adm))
	for i := range adm {
		if i > 0 && adm[i].Start == adm[i-1].Start {
			continue // the first of equal Starts counts them all
		}
		s := adm[i].Start
		ends = ends[:0]
		for _, a := range adm[i:] {
			ends = append(ends, a.End)
		}
		slices.Sort(ends)
		for j, t := range ends {
			if over := j + 1 - bucketBound(t-s, capacity, uses, window); over > ko.Max {
				ko.Max, ko.MaxAt = over, s
			}
		}
	}
	sort.Slice(adm, func(i, j int) bool { return adm[i].End < adm[j].End })
	var starts []time.Duration // of the kept, sorted
	for _, a := range adm {
		// Spans from a kept Start (or a's own) to a's End: every kept
		// admission ends by then; those starting at or after s are in.
		at, _ := slices.BinarySearch(starts, a.Start) // kept starts < a.Start lie before at
		excess := 1+len(starts)-at > bucketBound(a.End-a.Start, capacity, uses, window)
		for idx := 0; idx < at && !excess; idx++ {
			n := 1 + len(starts) - idx
			excess = n > bucketBound(a.End-starts[idx], capacity, uses, window)
		}
		if excess {
			ko.Total++
			continue
		}
		i, _ := slices.BinarySearch(starts, a.Start)
		starts = slices.Insert(starts, i, a.Start)
	}
	return ko
}
