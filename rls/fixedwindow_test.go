package rls_test

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ringlimit/ringlimit/rls"
)

// Each unit is counted in fixed windows aligned to the clock, as
// envoyproxy/ratelimit counts it, and duration_until_reset is the whole
// seconds to the window's end: a day resets at the next UTC midnight, not
// a day after the first call. Months and years are calendar ones.
func TestFixedWindowUnits(t *testing.T) {
	cfg := rls.Config{Domains: []rls.Domain{{Name: "u", Descriptors: []rls.Descriptor{
		{Key: "unit", Value: "day", RateLimit: &rls.RateLimit{Unit: "day", RequestsPerUnit: 2}},
		{Key: "unit", Value: "week", RateLimit: &rls.RateLimit{Unit: "week", RequestsPerUnit: 2}},
		{Key: "unit", Value: "month", RateLimit: &rls.RateLimit{Unit: "month", RequestsPerUnit: 2}},
		{Key: "unit", Value: "year", RateLimit: &rls.RateLimit{Unit: "year", RequestsPerUnit: 2}},
		{Key: "unit", Value: "zero", RateLimit: &rls.RateLimit{Unit: "hour", RequestsPerUnit: 0}},
	}}}}
	e := newEnv(t, cfg) // the clock stands at 2026-03-01T12:00:00Z
	e.clock.Advance(250 * time.Millisecond)
	month := rlsv3.RateLimitResponse_RateLimit_MONTH
	year := rlsv3.RateLimitResponse_RateLimit_YEAR
	week := rlsv3.RateLimitResponse_RateLimit_WEEK
	hour := rlsv3.RateLimitResponse_RateLimit_HOUR
	for _, c := range []struct {
		unit  string
		limit *rlsv3.RateLimitResponse_RateLimit
		reset time.Duration
	}{
		{"day", perUnit(2, day), 12 * time.Hour},                     // to 2026-03-02T00:00Z
		{"week", perUnit(2, week), 3*24*time.Hour + 12*time.Hour},    // epoch weeks start on Thursdays: 2026-03-05
		{"month", perUnit(2, month), 30*24*time.Hour + 12*time.Hour}, // to 2026-04-01, March has 31 days
		{"year", perUnit(2, year), 305*24*time.Hour + 12*time.Hour},  // to 2027-01-01
	} {
		for i := range 2 {
			r := e.call("u", 0, desc("unit", c.unit))
			want(t, c.unit, r.Statuses[0], ok, c.limit, int64(1-i))
			if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d != c.reset {
				t.Errorf("%s use %d: duration_until_reset %v, want %v", c.unit, i+1, d, c.reset)
			}
		}
		r := e.call("u", 0, desc("unit", c.unit))
		want(t, c.unit+" refused", r.Statuses[0], over, c.limit, 0)
		if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d != c.reset {
			t.Errorf("%s refused: duration_until_reset %v, want %v", c.unit, d, c.reset)
		}
	}
	// requests_per_unit 0 refuses until the end of the current hour.
	r := e.call("u", 0, desc("unit", "zero"))
	want(t, "zero", r.Statuses[0], over, perUnit(0, hour), 0)
	if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d != time.Hour {
		t.Errorf("zero: duration_until_reset %v, want 1h (the hour's end, in whole seconds)", d)
	}
	// At midnight the day is whole again; the month is not.
	e.clock.Advance(12 * time.Hour)
	want(t, "day after midnight", e.call("u", 0, desc("unit", "day")).Statuses[0], ok, perUnit(2, day), 1)
	want(t, "month after midnight", e.call("u", 0, desc("unit", "month")).Statuses[0], over, perUnit(2, month), 0)
}
