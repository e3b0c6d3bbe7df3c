package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// Options.Shadow: every request is served; the ones over the limit get
// the headers of a spent quota and no Retry-After, are counted and
// logged (throttled), and the store holds what enforcing would have
// recorded, so turning shadow mode off refuses at once.
func TestShadowGlobal(t *testing.T) {
	clock := limiter.NewFakeClock(t0)
	store := newKeyStore(t, clock)
	logger, logs := newLogger()
	limit := limiter.Limit{Uses: 2, Window: time.Minute}
	l, err := httplimit.NewLimiter(store, httplimit.Options{Limit: limit, Shadow: true, Logger: logger, Clock: clock,
		Headers: httplimit.HeadersStandard | httplimit.HeadersLegacy})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, l.Middleware(ok))
	steps := []struct {
		remaining, reset string
	}{
		{"1", "60"},
		{"0", "60"},
		{"0", "60"}, // over the limit: served, 0 left, the refusal's wait
		{"0", "60"},
	}
	for i, st := range steps {
		r := do(t, srv, "GET", "/")
		h := rlHeaders(r.header)
		if r.status != 200 || h["RateLimit-Remaining"] != st.remaining || h["RateLimit-Reset"] != st.reset || h["Retry-After"] != "" {
			t.Fatalf("step %d: %d %v, want 200 with remaining %s, reset %s, no Retry-After", i, r.status, h, st.remaining, st.reset)
		}
		if want := "1772366460"; h["X-RateLimit-Reset"] != want { // t0 + 60 s
			t.Fatalf("step %d: X-RateLimit-Reset %q, want %s", i, h["X-RateLimit-Reset"], want)
		}
	}
	if st := l.ShadowStats(); st.Calls != 4 || st.WouldRefuse != 2 {
		t.Fatalf("ShadowStats() = %+v, want 4 calls, 2 would refuse", st)
	}
	lines := logs.Lines()
	if len(lines) != 1 || !strings.Contains(lines[0], `msg="rate limit would have refused" limit=default rule=2/1m`) {
		t.Fatalf("log %q, want one would-refuse line for the limit named default", lines)
	}
	// Enforcing over the same store: the two allowed requests are there,
	// the two shadowed ones are not (a refusal records nothing).
	v, err := limiter.Peek(context.Background(), store, "http:*:127.0.0.1", limit)
	if err != nil || v.Allowed || v.RetryAfter != time.Minute {
		t.Fatalf("Peek after shadow = %+v, %v; want refused for the whole minute (2 uses recorded)", v, err)
	}
}

// Rule.Shadow: one route in shadow mode, the rest enforced.
func TestShadowRule(t *testing.T) {
	store := newKeyStore(t, nil)
	l, err := httplimit.NewLimiter(store, httplimit.Options{
		Limit:  limiter.Limit{Uses: 1, Window: time.Minute},
		Routes: []httplimit.Rule{{Pattern: "GET /search", Limit: limiter.Limit{Uses: 1, Window: time.Minute}, Shadow: true}},
		Logger: discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", ok)
	srv := serve(t, l.Middleware(mux))
	for i, want := range []int{200, 200, 200} {
		if r := do(t, srv, "GET", "/search"); r.status != want {
			t.Fatalf("search %d: %d, want %d (shadowed route)", i, r.status, want)
		}
	}
	for i, want := range []int{200, 429} {
		if r := do(t, srv, "GET", "/other"); r.status != want {
			t.Fatalf("other %d: %d, want %d (enforced global limit)", i, r.status, want)
		}
	}
	if st := l.ShadowStats(); st.Calls != 3 || st.WouldRefuse != 2 {
		t.Fatalf("ShadowStats() = %+v, want 3 calls, 2 would refuse (the global limit is not shadowed)", st)
	}
}

// A rule's name is its limit's Name, the metrics label: Rule.Name, else
// the pattern; the global rule's Options.Name ("default"); a name set on
// the limit itself wins.
func TestLimitNames(t *testing.T) {
	store := newKeyStore(t, nil)
	minute := limiter.Limit{Uses: 100, Window: time.Minute}
	named := minute
	named.Name = "own-name"
	l, err := httplimit.NewLimiter(store, httplimit.Options{
		Limit: minute,
		Routes: []httplimit.Rule{
			httplimit.Route("POST /login", minute),
			{Pattern: "GET /items/{id}", Limit: minute, Name: "items"},
			httplimit.Route("GET /profile", named),
			httplimit.Route("GET /"+strings.Repeat("é", 100), minute),
		},
		Logger: discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := l.Wrap(httplimit.Rule{Limit: minute}, ok)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", ok)
	mux.Handle("/wrapped", wrapped)
	srv := serve(t, l.Middleware(mux))
	long := "GET /" + strings.Repeat("é", 100)
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/login", "POST /login"},
		{"GET", "/items/7", "items"},
		{"GET", "/profile", "own-name"},
		{"GET", "/anything", "default"},
		{"GET", "/" + strings.Repeat("é", 100), long[:limiter.MaxNameBytes-1]}, // cut before a split character
	} {
		do(t, srv, c.method, c.path)
		if got := store.allNames(); len(got) != 1 || got[0] != c.want {
			t.Errorf("%s %s: limit names %q, want [%q]", c.method, c.path, got, c.want)
		}
	}
	do(t, srv, "GET", "/wrapped")
	if got := store.allNames(); len(got) != 2 || got[0] != "default" || got[1] != "default" {
		t.Errorf("GET /wrapped: limit names %q, want the middleware's and the wrapper's, both \"default\"", got)
	}
	// A name the limit cannot carry is refused when the rules are built.
	bad := minute
	bad.Name = "bad\xff"
	_, err = httplimit.NewLimiter(store, httplimit.Options{Limit: bad})
	var ie *limiter.InputError
	if !errors.As(err, &ie) || ie.Field != "Limit.name" {
		t.Fatalf("a bad limit name: %v, want an *InputError naming Limit.name", err)
	}
}
