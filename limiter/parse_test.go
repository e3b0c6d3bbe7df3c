package limiter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration // 0: an error
	}{
		{"1500", 1500 * time.Millisecond},
		{"1", time.Millisecond},
		{"500ms", 500 * time.Millisecond},
		{"15s", 15 * time.Second},
		{"1.5m", 90 * time.Second},
		{"1h", time.Hour},
		{"1d", 24 * time.Hour},
		{"0.5ms", time.Millisecond},          // rounded up to whole ms
		{"1.0001s", 1001 * time.Millisecond}, // rounded up, not to nearest
		{"0.0001s", time.Millisecond},        // exact decimal: never 0
		{"2.5", 3 * time.Millisecond},        // a bare number is ms
		{"007s", 7 * time.Second},
		{"9223372036854", limiter.MaxWindow},
		{"9223372036854ms", limiter.MaxWindow},
		{"9223372036853.5", limiter.MaxWindow}, // rounds up onto the largest
		{"106751d", 106751 * 24 * time.Hour},
		// errors
		{"9223372036855", 0}, // one more than the largest
		{"9223372036854.001", 0},
		{"106752d", 0},
		{"1w", 0},
		{"1 m", 0},
		{" 1m", 0},
		{"1m ", 0},
		{"0", 0},
		{"0ms", 0},
		{"0.0", 0},
		{"-1s", 0},
		{"+1s", 0},
		{"NaN", 0},
		{"Inf", 0},
		{"1e3", 0},
		{"", 0},
		{"ms", 0},
		{"1.s", 0},
		{".5s", 0},
		{"1..5s", 0},
		{"1.5.5s", 0},
		{"1us", 0},
		{"1ns", 0},
		{"1M", 0},
		{"1S", 0},
		{"1h30m", 0},
		{"1,5m", 0},
		{"0x10", 0},
		{"1_000", 0},
		{"１s", 0}, // a full-width digit
		{strings.Repeat("9", 100), 0},
	} {
		got, err := limiter.ParseDuration(c.in)
		if c.want == 0 {
			var ie *limiter.InputError
			if err == nil || !errors.As(err, &ie) || ie.Field != "window" || !errors.Is(err, limiter.ErrInvalid) {
				t.Errorf("ParseDuration(%q) = %v, %v; want an *InputError on \"window\"", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{time.Millisecond, "1ms"},
		{1500 * time.Millisecond, "1500ms"},
		{15 * time.Second, "15s"},
		{90 * time.Second, "90s"},
		{15 * time.Minute, "15m"},
		{time.Hour, "1h"},
		{48 * time.Hour, "2d"},
		{limiter.MaxWindow, "9223372036854ms"},
		{1500 * time.Microsecond, "1.5ms"}, // not whole ms: Duration.String
		{0, "0s"},
	} {
		if got := limiter.FormatDuration(c.in); got != c.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseLimit(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  limiter.Limit
		field string // the error's field; "" when it parses
	}{
		{"5/15m", limiter.Limit{Uses: 5, Window: 15 * time.Minute}, ""},
		{"1/1", limiter.Limit{Uses: 1, Window: time.Millisecond}, ""},
		{"sliding-log:3/1s", limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 3, Window: time.Second}, ""},
		{"sliding-window:100/1m", limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 100, Window: time.Minute}, ""},
		{"token-bucket:100/1s", limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Second}, ""},
		{"9223372036854775807/9223372036854", limiter.Limit{Uses: 1<<63 - 1, Window: limiter.MaxWindow}, ""},
		{"5/1.5m", limiter.Limit{Uses: 5, Window: 90 * time.Second}, ""},
		{"5", limiter.Limit{}, "limit"},
		{"", limiter.Limit{}, "limit"},
		{"5/", limiter.Limit{}, "window"},
		{"/1s", limiter.Limit{}, "uses"},
		{"0/1s", limiter.Limit{}, "uses"},
		{"-1/1s", limiter.Limit{}, "uses"},
		{"+1/1s", limiter.Limit{}, "uses"},
		{"1.5/1s", limiter.Limit{}, "uses"},
		{"9223372036854775808/1s", limiter.Limit{}, "uses"},
		{" 5/1s", limiter.Limit{}, "uses"},
		{"5/1w", limiter.Limit{}, "window"},
		{"5/0", limiter.Limit{}, "window"},
		{"5/1s/2", limiter.Limit{}, "window"},
		{"leaky:5/1s", limiter.Limit{}, "algorithm"},
		{":5/1s", limiter.Limit{}, "algorithm"},
		{"Token-Bucket:5/1s", limiter.Limit{}, "algorithm"},
		{"token-bucket:100/1s,burst=500", limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Second, Burst: 500}, ""},
		{"token-bucket:100/1s,burst=1", limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Second, Burst: 1}, ""},
		{"token-bucket:100/1s,burst=0", limiter.Limit{}, "burst"},
		{"token-bucket:100/1s,burst=-5", limiter.Limit{}, "burst"},
		{"token-bucket:100/1s,burst=+5", limiter.Limit{}, "burst"},
		{"token-bucket:100/1s,burst=", limiter.Limit{}, "burst"},
		{"token-bucket:100/1s,burst=5,burst=6", limiter.Limit{}, "burst"},
		{"token-bucket:100/1s,size=5", limiter.Limit{}, "limit"},
		{"100/1s,burst=500", limiter.Limit{}, "burst"},
		{"sliding-window:100/1s,burst=500", limiter.Limit{}, "burst"},
		{"fixed-window:100/1mo,burst=500", limiter.Limit{}, "burst"},
	} {
		got, err := limiter.ParseLimit(c.in)
		if c.field != "" {
			var ie *limiter.InputError
			if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, limiter.ErrInvalid) {
				t.Errorf("ParseLimit(%q) = %v, %v; want an *InputError on %q", c.in, got, err, c.field)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("ParseLimit(%q) = %+v, which does not validate: %v", c.in, got, err)
		}
	}
}

func TestLimitString(t *testing.T) {
	for _, c := range []struct {
		in   limiter.Limit
		want string
	}{
		{limiter.Limit{Uses: 5, Window: 15 * time.Minute}, "5/15m"},
		{limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Second}, "token-bucket:100/1s"},
		{limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 10, Window: 1500 * time.Millisecond}, "sliding-window:10/1500ms"},
		{limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Second, Burst: 500}, "token-bucket:100/1s,burst=500"},
	} {
		if got := c.in.String(); got != c.want {
			t.Errorf("%+v.String() = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket, limiter.FixedWindow, limiter.Concurrency} {
		got, err := limiter.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", a.String(), got, err, a)
		}
		if !a.Valid() {
			t.Errorf("%v.Valid() = false", a)
		}
	}
	if s := limiter.Algorithm(7).String(); s != "Algorithm(7)" {
		t.Errorf("Algorithm(7).String() = %q", s)
	}
	if limiter.Algorithm(5).Valid() {
		t.Error("Algorithm(5).Valid() = true")
	}
	for _, in := range []string{"", "sliding_log", "SLIDING-LOG", "gcra", "token-bucket ", "fixed_window", "fixed"} {
		_, err := limiter.ParseAlgorithm(in)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != "algorithm" {
			t.Errorf("ParseAlgorithm(%q) error = %v, want an *InputError on \"algorithm\"", in, err)
		}
	}
}

func TestLimitValidate(t *testing.T) {
	for _, c := range []struct {
		l     limiter.Limit
		field string
	}{
		{limiter.Limit{Uses: 1, Window: time.Millisecond}, ""},
		{limiter.Limit{Uses: 1, Window: limiter.MaxWindow}, ""},
		{limiter.Limit{Algorithm: 5, Uses: 1, Window: time.Second}, "algorithm"},
		{limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: time.Second}, ""},
		{limiter.Limit{Uses: 0, Window: time.Second}, "uses"},
		{limiter.Limit{Uses: -5, Window: time.Second}, "uses"},
		{limiter.Limit{Uses: 1, Window: 0}, "window"},
		{limiter.Limit{Uses: 1, Window: -time.Second}, "window"},
		{limiter.Limit{Uses: 1, Window: 999 * time.Microsecond}, "window"},
		{limiter.Limit{Uses: 1, Window: 1500 * time.Microsecond}, "window"},
		{limiter.Limit{Uses: 1, Window: limiter.MaxWindow + time.Microsecond}, "window"},
		{limiter.Limit{Uses: 1, Window: 1<<63 - 1}, "window"},
		{limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1, Window: time.Second, Burst: 7}, ""},
		{limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1, Window: time.Second, Burst: -1}, "burst"},
		{limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 1, Window: time.Second, Burst: 7}, "burst"},
		{limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: time.Second, Burst: 7}, "burst"},
	} {
		err := c.l.Validate()
		if c.field == "" {
			if err != nil {
				t.Errorf("%+v.Validate() = %v", c.l, err)
			}
			continue
		}
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, limiter.ErrInvalid) || errors.Is(err, limiter.ErrBound) {
			t.Errorf("%+v.Validate() = %v, want an *InputError on %q", c.l, err, c.field)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1500", "500ms", "15s", "1.5m", "1h", "1d", "1w", "1 m", "0", "-1s", "NaN",
		"9223372036854", "9223372036855", "0.0001s", "1e3", "106751d", "1.", ".1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := limiter.ParseDuration(s)
		if err != nil {
			var ie *limiter.InputError
			if !errors.As(err, &ie) || ie.Field != "window" {
				t.Fatalf("ParseDuration(%q) error %v is not an *InputError on \"window\"", s, err)
			}
			if d != 0 {
				t.Fatalf("ParseDuration(%q) = %v with an error", s, d)
			}
			return
		}
		if d < time.Millisecond || d > limiter.MaxWindow || d%time.Millisecond != 0 {
			t.Fatalf("ParseDuration(%q) = %v: not whole ms in [1ms, MaxWindow]", s, d)
		}
		f := limiter.FormatDuration(d)
		back, err := limiter.ParseDuration(f)
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v; FormatDuration gives %q, which parses as %v, %v", s, d, f, back, err)
		}
	})
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"5/15m", "token-bucket:100/1s", "sliding-window:1/1", "0/1s", "5/0", "x:1/1s",
		"9223372036854775807/9223372036854", "1/1/1", ":", "/", "1:2/3",
		"fixed-window:1000/1mo", "fixed-window:5/1d@Europe/Paris", "fixed-window:1/1y@UTC", "fixed-window:1/1d@",
		"token-bucket:100/1s,burst=500", "token-bucket:1/1s,burst=1,", "5/1s,burst=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := limiter.ParseLimit(s)
		if err != nil {
			var ie *limiter.InputError
			if !errors.As(err, &ie) || !errors.Is(err, limiter.ErrInvalid) {
				t.Fatalf("ParseLimit(%q) error %v is not an *InputError", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %+v, which does not validate: %v", s, l, err)
		}
		back, err := limiter.ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLimit(%q) = %+v; String gives %q, which parses as %+v, %v", s, l, l.String(), back, err)
		}
	})
}
