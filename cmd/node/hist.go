package main

import "math/bits"

// histogram records latencies in nanoseconds in fixed log-linear buckets,
// HDR-style: exact below 64 ns, then 32 buckets per power of two, so a
// value is known to within 1/32 (about 3%). Recording is an index
// computation and an increment: no allocation, no lock (one histogram per
// worker, merged at the end).
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    int64
}

const (
	histSubBits = 5
	histSub     = 1 << histSubBits // buckets per power of two
	histBuckets = 64 * histSub     // covers every int64
)

// histIndex is the bucket of v >= 0.
func histIndex(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - histSubBits - 1
	return shift*histSub + int(v>>shift)
}

// histHigh is the largest value in bucket i (what a quantile reports, as
// HDR's "highest equivalent value" does: never under the truth).
func histHigh(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	shift := i/histSub - 1
	m := int64(i - shift*histSub)
	return (m+1)<<shift - 1
}

func (h *histogram) record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(v)]++
	h.n++
	if v > h.max {
		h.max = v
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the value at quantile q (0..1): the high end of the
// bucket holding the ceil(q*n)-th smallest value, capped by the maximum.
func (h *histogram) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(histHigh(i), h.max)
		}
	}
	return h.max
}
