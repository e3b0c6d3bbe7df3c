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
