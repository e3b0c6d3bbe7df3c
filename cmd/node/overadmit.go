package main

import (
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// admission is one allowed call as the client saw it: its key and when it
// was sent and when its verdict came back, in µs since the run started
// (sent rounded down, recv rounded up).
type admission struct {
	key        uint32
	sent, recv uint32
}

// maxOveradmit returns the largest number of allowed calls beyond uses that
// certainly lie in one window of a sliding log, for any key, and that key.
//
// How, exactly: the owner recorded each allowed call at some instant
// between its send and its receive (on a clock that runs at the client's
// rate; the owner's clock readings themselves are never needed). A set of
// calls of one key was therefore certainly recorded inside a span shorter
// than the window W when its latest receive minus its earliest send is less
// than W — and a sliding log that admits uses+1 calls inside a span shorter
// than W has admitted one call while uses others lay in its window, which
// it must not. So for each key, with its calls sorted by send time, and
// each call a as the earliest, we count the calls j (a included) with
// sent[j] >= sent[a] and recv[j] < sent[a] + W; the excess over uses is an
// over-admission that certainly happened. Calls whose instants are unsure
// are left out, so the count can miss an over-admission (never invent one);
// with verdicts in a few hundred µs and a window of 1 s it misses little.
//
// adm is sorted in place.
func maxOveradmit(adm []admission, uses int64, windowUs uint32) (over int64, key uint32) {
	slices.SortFunc(adm, func(a, b admission) int {
		if a.key != b.key {
			return int(a.key) - int(b.key)
		}
		return int(a.sent) - int(b.sent)
	})
	// Two pointers: for each a, the calls sent within [sent[a], end) are
	// adm[a:hi]; those among them received at or after end were sent
	// within the key's longest latency before end, so a short backward
	// scan finds them, and only when the range could beat the excess
	// found so far (a run of millions of calls stays linear).
	for lo := 0; lo < len(adm); {
		k := adm[lo].key
		next := lo
		var maxLat uint64
		for next < len(adm) && adm[next].key == k {
			maxLat = max(maxLat, uint64(adm[next].recv)-min(uint64(adm[next].sent), uint64(adm[next].recv)))
			next++
		}
		hi := lo
		for a := lo; a < next; a++ {
			end := uint64(adm[a].sent) + uint64(windowUs) // exclusive
			hi = max(hi, a)
			for hi < next && uint64(adm[hi].sent) < end {
				hi++
			}
			n := int64(hi - a)
			if n-uses <= over {
				continue
			}
			for j := hi - 1; j >= a && uint64(adm[j].sent)+maxLat >= end; j-- {
				if uint64(adm[j].recv) >= end {
					n--
				}
			}
			if n-uses > over {
				over, key = n-uses, k
			}
		}
		lo = next
	}
	return over, key
}

// maxBucketOveradmit returns the largest number of allowed calls beyond a
// token bucket's bound that certainly happened, for any key, and that key.
// A bucket of capacity b refilling uses per window W admits at most
// b + uses·τ/W calls (of cost 1) in any span τ, whatever its level at the
// start. As in maxOveradmit, each call was decided between its send and
// its receive: calls i..j of a key (sorted by send) all lie in
// [sent[i], PM[j]], where PM[j] is the latest receive among the key's
// calls up to j (at least every receive in i..j). So
// (j-i+1) - b - floor(uses·(PM[j]-sent[i])/W) > 0 is an over-admission
// that certainly happened; the span is overstated, never understated, so
// the check can miss one and never invents one. With
// E = (j+1)·W - uses·PM[j] - (i·W - uses·sent[i]) - b·W, the excess is
// ceil(E/W), and the best i for each j is a running minimum: linear.
//
// adm is sorted in place.
func maxBucketOveradmit(adm []admission, uses, capacity int64, windowUs uint32) (over int64, key uint32) {
	slices.SortFunc(adm, func(a, b admission) int {
		if a.key != b.key {
			return int(a.key) - int(b.key)
		}
		return int(a.sent) - int(b.sent)
	})
	W := int64(windowUs)
	for lo := 0; lo < len(adm); {
		k := adm[lo].key
		var pm, m int64
		j := lo
		for ; j < len(adm) && adm[j].key == k; j++ {
			i := int64(j - lo)
			if v := i*W - uses*int64(adm[j].sent); i == 0 || v < m {
				m = v
			}
			pm = max(pm, int64(adm[j].recv))
			if e := (i+1)*W - uses*pm - m - capacity*W; e > 0 {
				if x := (e + W - 1) / W; x > over {
					over, key = x, k
				}
			}
		}
		lo = j
	}
	return over, key
}

// checksOveradmit: the algorithms whose bound the bench checks.
func checksOveradmit(l limiter.Limit) bool {
	return l.Algorithm == limiter.SlidingLog || l.Algorithm == limiter.TokenBucket
}

// overadmitOf is the check of l's algorithm over adm (sorted in place).
func overadmitOf(adm []admission, l limiter.Limit) (over int64, key uint32) {
	w := uint32(l.Window / time.Microsecond)
	if l.Algorithm == limiter.TokenBucket {
		return maxBucketOveradmit(adm, l.Uses, l.Capacity(), w)
	}
	return maxOveradmit(adm, l.Uses, w)
}
