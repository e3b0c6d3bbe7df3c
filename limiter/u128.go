package limiter

import "math/bits"

// u128 is an unsigned 128-bit integer. The algorithms multiply uses by
// windows in microseconds (up to 2^63 * 2^53), so exact arithmetic needs
// more than 64 bits; doing it exactly means no store drifts from another
// by a float rounding.
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

// sub returns x-y; callers ensure x >= y.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

func (x u128) cmp(y u128) int {
	switch {
	case x.hi < y.hi:
		return -1
	case x.hi > y.hi:
		return 1
	case x.lo < y.lo:
		return -1
	case x.lo > y.lo:
		return 1
	}
	return 0
}

func (x u128) isZero() bool { return x.hi == 0 && x.lo == 0 }

// divmod returns x/d and x%d. The quotient must fit in 64 bits; where it
// might not, it saturates rather than panic.
func (x u128) divmod(d uint64) (q, r uint64) {
	if x.hi >= d {
		return ^uint64(0), 0
	}
	return bits.Div64(x.hi, x.lo, d)
}

// divCeil returns ceil(x/d), saturating.
func (x u128) divCeil(d uint64) uint64 {
	q, r := x.divmod(d)
	if r > 0 && q < ^uint64(0) {
		q++
	}
	return q
}

func u(x int64) uint64 {
	if x < 0 {
		return 0
	}
	return uint64(x)
}

func u128of(x int64) u128 { return u128{0, u(x)} }
