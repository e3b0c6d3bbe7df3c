package httplimit_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// SetDraftHeaders gives a verdict decided outside the middleware the
// headers the middleware gives with HeadersDraft: the same figures over
// named instants, and for a batch one item per policy.
func TestSetDraftHeaders(t *testing.T) {
	login := limiter.Limit{Uses: 1, Window: 1500 * time.Millisecond}
	quota := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Minute}
	for _, c := range []struct {
		name     string
		v        limiter.Verdict
		policies []httplimit.Policy
		want     http.Header
	}{
		{"allowed: t rounds up", limiter.Verdict{Allowed: true, Remaining: 0, ResetAt: t0.Add(1500 * time.Millisecond)},
			[]httplimit.Policy{{Name: "login", Limit: login}},
			http.Header{"Ratelimit-Policy": {`"login";q=1;w=2`}, "Ratelimit": {`"login";r=0;t=2`}}},
		{"refused: r is 0, t and Retry-After the wait", limiter.Verdict{Remaining: 3, RetryAfter: 100 * time.Millisecond},
			[]httplimit.Policy{{Name: "login", Limit: login}},
			http.Header{"Ratelimit-Policy": {`"login";q=1;w=2`}, "Ratelimit": {`"login";r=0;t=1`}, "Retry-After": {"1"}}},
		{"refused with no wait left: still 1", limiter.Verdict{},
			[]httplimit.Policy{{Name: "login", Limit: login}},
			http.Header{"Ratelimit-Policy": {`"login";q=1;w=2`}, "Ratelimit": {`"login";r=0;t=1`}, "Retry-After": {"1"}}},
		{"a batch: every policy, the batch's figures", limiter.Verdict{Allowed: true, Remaining: 7, ResetAt: t0.Add(59 * time.Second)},
			[]httplimit.Policy{{Name: "entries[0]", Limit: login}, {Name: "entries[1]", Limit: quota}},
			http.Header{"Ratelimit-Policy": {`"entries[0]";q=1;w=2, "entries[1]";q=100;w=60`}, "Ratelimit": {`"entries[0]";r=7;t=59, "entries[1]";r=7;t=59`}}},
		{"no policy: only Retry-After", limiter.Verdict{RetryAfter: 2500 * time.Millisecond}, nil,
			http.Header{"Retry-After": {"3"}}},
	} {
		h := http.Header{}
		httplimit.SetDraftHeaders(h, c.v, t0, c.policies...)
		if !reflect.DeepEqual(h, c.want) {
			t.Errorf("%s: %v, want %v", c.name, h, c.want)
		}
	}
}
