package limiter

import (
	"math/big"
	"strconv"
	"time"
)

var durationUnits = []struct {
	suffix string
	ms     int64
}{
	{"ms", 1},
	{"s", 1000},
	{"m", 60 * 1000},
	{"h", 3600 * 1000},
	{"d", 24 * 3600 * 1000},
}

// ParseDuration reads a window: a number of milliseconds ("1500"), or a
// number with one unit of ms, s, m, h or d ("500ms", "15s", "1.5m", "1h",
// "1d"). The value is rounded up to whole milliseconds and must lie between
// 1 ms and MaxWindow. Anything else ("1w", "1 m", "0", "-1s", "NaN",
// "1e3") is an *InputError on the field "window". The arithmetic is exact
// decimal: "0.0001s" is 1 ms, never 0 by a float rounding.
func ParseDuration(s string) (time.Duration, error) {
	num, unit := s, int64(1)
	for _, u := range durationUnits {
		if n := len(s) - len(u.suffix); n > 0 && s[n:] == u.suffix {
			// "ms" must win over "s": it is listed first, and "5ms" never
			// reaches the "s" case.
			num, unit = s[:n], u.ms
			break
		}
	}
	if !decimal(num) {
		return 0, invalid("window", "%q is not a duration (a number of ms, or a number with ms, s, m, h or d, e.g. 15m)", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, invalid("window", "%q is not a duration", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(unit))
	// Round up to whole milliseconds.
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if q.Sign() <= 0 {
		return 0, invalid("window", "%q must be at least 1ms", s)
	}
	if !q.IsInt64() || q.Int64() > int64(MaxWindow/time.Millisecond) {
		return 0, invalid("window", "%q is longer than the largest window, %dms (about 292 years)", s, int64(MaxWindow/time.Millisecond))
	}
	return time.Duration(q.Int64()) * time.Millisecond, nil
}

// decimal reports whether s is digits with at most one '.' between digits.
func decimal(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	dot := -1
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && dot < 0:
			dot = i
		default:
			return false
		}
	}
	return dot != 0 && dot != len(s)-1
}

// FormatDuration writes d in the largest unit of ParseDuration that
// represents it exactly ("15m", "1500ms", "1d"). d must be a whole number
// of milliseconds; other durations are written by time.Duration.String.
func FormatDuration(d time.Duration) string {
	if d <= 0 || d%time.Millisecond != 0 {
		return d.String()
	}
	ms := int64(d / time.Millisecond)
	for i := len(durationUnits) - 1; i >= 0; i-- {
		u := durationUnits[i]
		if ms%u.ms == 0 {
			return strconv.FormatInt(ms/u.ms, 10) + u.suffix
		}
	}
	return strconv.FormatInt(ms, 10) + "ms"
}
