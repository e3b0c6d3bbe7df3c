package httplimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// Header values over named instants of a fake clock shared by the store
// and the middleware.
func TestHeaders(t *testing.T) {
	plus := func(s int64) string { return strconv.FormatInt(t0.Unix()+s, 10) }
	login := limiter.Limit{Uses: 1, Window: 1500 * time.Millisecond}
	type step struct {
		advance time.Duration
		path    string
		status  int
		want    map[string]string
	}
	for _, c := range []struct {
		name    string
		headers httplimit.Headers
		steps   []step
	}{
		{"standard", 0, []step{
			{0, "/", 200, map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "99", "RateLimit-Reset": "60"}},
			{time.Second, "/", 200, map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "98", "RateLimit-Reset": "60"}},
			// 1.5 s window: reset rounds up to 2.
			{0, "/login", 200, map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "2"}},
			{0, "/login", 429, map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "2", "Retry-After": "2"}},
			// 100 ms left: Retry-After rounds up to 1.
			{1400 * time.Millisecond, "/login", 429, map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "1", "Retry-After": "1"}},
			// 1 ms left: still at least 1.
			{99 * time.Millisecond, "/login", 429, map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "1", "Retry-After": "1"}},
			{time.Millisecond, "/login", 200, map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "2"}},
		}},
		{"draft-11", httplimit.HeadersDraft, []step{
			{0, "/", 200, map[string]string{"RateLimit-Policy": `"default";q=100;w=60`, "RateLimit": `"default";r=99;t=60`}},
			{0, "/login", 200, map[string]string{"RateLimit-Policy": `"POST /login";q=1;w=2`, "RateLimit": `"POST /login";r=0;t=2`}},
			{500 * time.Millisecond, "/login", 429, map[string]string{"RateLimit-Policy": `"POST /login";q=1;w=2`, "RateLimit": `"POST /login";r=0;t=1`, "Retry-After": "1"}},
		}},
		{"legacy", httplimit.HeadersLegacy, []step{
			{0, "/", 200, map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99", "X-RateLimit-Reset": plus(60)}},
			{0, "/login", 200, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": plus(2)}},
			{0, "/login", 429, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": plus(2), "Retry-After": "2"}},
		}},
		{"all", httplimit.HeadersStandard | httplimit.HeadersDraft | httplimit.HeadersLegacy, []step{
			{0, "/", 200, map[string]string{
				"RateLimit-Limit": "100", "RateLimit-Remaining": "99", "RateLimit-Reset": "60",
				"RateLimit-Policy": `"default";q=100;w=60`, "RateLimit": `"default";r=99;t=60`,
				"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99", "X-RateLimit-Reset": plus(60),
			}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := limiter.NewFakeClock(t0)
			store := newKeyStore(t, clock)
			mw, err := httplimit.New(store, httplimit.Options{
				Limit:   limiter.Limit{Uses: 100, Window: time.Minute},
				Routes:  []httplimit.Rule{{Pattern: "/login", Limit: login, Name: "POST /login"}},
				Headers: c.headers,
				Clock:   clock,
				Logger:  discard,
			})
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, mw(ok))
			for i, s := range c.steps {
				clock.Advance(s.advance)
				r := do(t, srv, "GET", s.path)
				if got := rlHeaders(r.header); r.status != s.status || !reflect.DeepEqual(got, s.want) {
					t.Errorf("step %d (%s): %d %v\n want %d %v", i, s.path, r.status, got, s.status, s.want)
				}
			}
		})
	}
}

// The exact 429 answer.
func TestRefusalBody(t *testing.T) {
	clock := limiter.NewFakeClock(t0)
	store := newKeyStore(t, clock)
	mw, err := httplimit.New(store, httplimit.Options{Limit: limiter.Limit{Uses: 1, Window: 15 * time.Minute}, Clock: clock, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, mw(ok))
	do(t, srv, "POST", "/login")
	r := do(t, srv, "POST", "/login?user=ada")
	const body = `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded","instance":"/login"}`
	if r.status != 429 || r.body != body {
		t.Errorf("got %d %s\nwant 429 %s", r.status, r.body, body)
	}
	for k, v := range map[string]string{"Content-Type": "application/problem+json; charset=utf-8", "X-Content-Type-Options": "nosniff", "Retry-After": "900", "RateLimit-Reset": "900", "RateLimit-Remaining": "0", "Content-Length": strconv.Itoa(len(body))} {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	// A path needing escapes stays valid JSON.
	r = do(t, srv, "GET", "/a%22b/%3Cc%3E")
	var p map[string]any
	if err := json.Unmarshal([]byte(r.body), &p); err != nil || p["instance"] != "/a%22b/%3Cc%3E" {
		t.Errorf("body %s: %v, instance %v", r.body, err, p["instance"])
	}
}

// Store errors follow OnStoreError and go to the throttled failure log.
func TestStoreErrors(t *testing.T) {
	for _, policy := range []fallback.Policy{fallback.Deny, fallback.Allow} {
		t.Run(policy.String(), func(t *testing.T) {
			store := newKeyStore(t, nil)
			logger, logs := newLogger()
			mw, err := httplimit.New(store, httplimit.Options{Limit: perMinute, OnStoreError: policy, Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, mw(ok))
			store.failWith(errBoom)
			var ids []string
			for i := 0; i < 3; i++ {
				r := do(t, srv, "GET", "/x")
				if policy == fallback.Allow {
					if r.status != 200 || len(rlHeaders(r.header)) != 0 {
						t.Errorf("call %d: %d %v; want 200 without headers", i, r.status, rlHeaders(r.header))
					}
					continue
				}
				var p struct {
					ID string `json:"correlation_id"`
				}
				json.Unmarshal([]byte(r.body), &p)
				ids = append(ids, p.ID)
				body := `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"Rate limit store unavailable","instance":"/x","correlation_id":"` + p.ID + `"}`
				if r.status != 503 || r.body != body || len(p.ID) != 16 {
					t.Errorf("call %d: %d %s\nwant 503 %s", i, r.status, r.body, body)
				}
			}
			store.failWith(nil)
			if r := do(t, srv, "GET", "/x"); r.status != 200 || r.header.Get("RateLimit-Remaining") != "99" {
				t.Errorf("after recovery: %d %v", r.status, rlHeaders(r.header))
			}
			lines := logs.Lines()
			if len(lines) != 2 || !strings.HasPrefix(lines[0], `level=WARN msg="rate limit store failed" id=`) ||
				!strings.HasSuffix(lines[0], ` err="redis: connection refused"`) ||
				lines[1] != `level=INFO msg="rate limit store recovered" failures=3` {
				t.Errorf("log %q", lines)
			}
			if policy == fallback.Deny && !strings.Contains(lines[0], "id="+ids[0]+" ") {
				t.Errorf("log %q does not carry the first answer's id %s", lines[0], ids[0])
			}
		})
	}
}

// A store wrapped by fallback answers with policy verdicts: Deny is 503,
// Allow passes without headers, Local is a real count (429 when refused).
func TestFallbackVerdicts(t *testing.T) {
	for _, c := range []struct {
		policy   fallback.Policy
		statuses []int
	}{
		{fallback.Deny, []int{503, 503, 503}},
		{fallback.Allow, []int{200, 200, 200}},
		{fallback.Local, []int{200, 200, 429}},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			inner := newKeyStore(t, nil)
			inner.failWith(errBoom)
			fb, err := fallback.New(inner, fallback.Config{Policy: c.policy, Logger: discard, KeepStoreOpen: true})
			if err != nil {
				t.Fatal(err)
			}
			defer fb.Close(context.Background())
			mw, err := httplimit.New(fb, httplimit.Options{Limit: limiter.Limit{Uses: 2, Window: time.Minute}, Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, mw(ok))
			for i, want := range c.statuses {
				r := do(t, srv, "GET", "/")
				if r.status != want {
					t.Errorf("call %d: %d %s, want %d", i, r.status, r.body, want)
				}
				if want == 429 && r.header.Get("Retry-After") == "" {
					t.Errorf("call %d: local refusal without Retry-After", i)
				}
				if c.policy == fallback.Allow && len(rlHeaders(r.header)) != 0 {
					t.Errorf("call %d: uncounted pass has headers", i)
				}
			}
		})
	}
}

var _ http.Handler = ok
