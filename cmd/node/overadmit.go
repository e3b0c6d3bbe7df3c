package main

import "slices"

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
	for a := 0; a < len(adm); a++ {
		end := uint64(adm[a].sent) + uint64(windowUs) // exclusive
		var n int64
		for j := a; j < len(adm) && adm[j].key == adm[a].key && uint64(adm[j].sent) < end; j++ {
			if uint64(adm[j].recv) < end {
				n++
			}
		}
		if n-uses > over {
			over, key = n-uses, adm[a].key
		}
	}
	return over, key
}
