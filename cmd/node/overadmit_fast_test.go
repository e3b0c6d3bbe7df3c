package main

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// naiveOveradmit is maxOveradmit's definition, quadratic.
func naiveOveradmit(adm []admission, uses int64, windowUs uint32) (over int64, key uint32) {
	slices.SortFunc(adm, func(a, b admission) int {
		if a.key != b.key {
			return int(a.key) - int(b.key)
		}
		return int(a.sent) - int(b.sent)
	})
	for a := 0; a < len(adm); a++ {
		end := uint64(adm[a].sent) + uint64(windowUs)
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

// The linear maxOveradmit (a bench of millions of local decisions made
// the quadratic one run for minutes) finds the same excess.
func TestMaxOveradmitLinear(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 200).Draw(t, "n")
		adm := make([]admission, n)
		for i := range adm {
			s := rapid.Uint32Range(0, 3000).Draw(t, "sent")
			adm[i] = admission{key: rapid.Uint32Range(0, 2).Draw(t, "key"), sent: s, recv: s + rapid.Uint32Range(0, 400).Draw(t, "lat")}
		}
		uses := rapid.Int64Range(0, 20).Draw(t, "uses")
		w := rapid.Uint32Range(1, 1500).Draw(t, "w")
		o1, _ := naiveOveradmit(slices.Clone(adm), uses, w)
		o2, _ := maxOveradmit(slices.Clone(adm), uses, w)
		if o1 != o2 {
			t.Fatalf("naive %d, linear %d", o1, o2)
		}
	})
}

// naiveBucketOveradmit is maxBucketOveradmit's definition, quadratic: every
// pair i ≤ j, the calls i..j inside [sent[i], max recv of i..j].
func naiveBucketOveradmit(adm []admission, uses, capacity int64, windowUs uint32) int64 {
	slices.SortFunc(adm, func(a, b admission) int {
		if a.key != b.key {
			return int(a.key) - int(b.key)
		}
		return int(a.sent) - int(b.sent)
	})
	var over int64
	for i := range adm {
		var latest int64
		for j := i; j < len(adm) && adm[j].key == adm[i].key; j++ {
			latest = max(latest, int64(adm[j].recv))
			n := int64(j - i + 1)
			if x := n - capacity - uses*(latest-int64(adm[i].sent))/int64(windowUs); x > over {
				over = x
			}
		}
	}
	return over
}

// The linear bucket check never reports more than the quadratic one that
// uses the exact latest receive of each range (its spans are never
// shorter), and finds what a burst beyond the capacity plainly is.
func TestMaxBucketOveradmit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 120).Draw(t, "n")
		adm := make([]admission, n)
		for i := range adm {
			s := rapid.Uint32Range(0, 3000).Draw(t, "sent")
			adm[i] = admission{key: rapid.Uint32Range(0, 2).Draw(t, "key"), sent: s, recv: s + rapid.Uint32Range(0, 400).Draw(t, "lat")}
		}
		uses := rapid.Int64Range(1, 20).Draw(t, "uses")
		capacity := rapid.Int64Range(1, 20).Draw(t, "capacity")
		w := rapid.Uint32Range(1, 1500).Draw(t, "w")
		naive := naiveBucketOveradmit(slices.Clone(adm), uses, capacity, w)
		got, _ := maxBucketOveradmit(slices.Clone(adm), uses, capacity, w)
		if got > naive {
			t.Fatalf("linear %d beyond the quadratic check's %d: it invented an over-admission", got, naive)
		}
	})
	// 12 calls at one instant from a bucket of 10: 2 beyond; the same 12
	// spread over a window of 10/1s refill: none.
	var burst, spread []admission
	for i := range 12 {
		burst = append(burst, admission{key: 1, sent: 5000, recv: 5000})
		spread = append(spread, admission{key: 1, sent: uint32(100_000 * i), recv: uint32(100_000*i + 50)})
	}
	if got, key := maxBucketOveradmit(burst, 10, 10, 1_000_000); got != 2 || key != 1 {
		t.Fatalf("12 at one instant from a bucket of 10: over %d (key %d), want 2", got, key)
	}
	if got, _ := maxBucketOveradmit(spread, 10, 10, 1_000_000); got != 0 {
		t.Fatalf("12 spread over 1.1 s at 10/s from a bucket of 10: over %d, want 0", got)
	}
}
