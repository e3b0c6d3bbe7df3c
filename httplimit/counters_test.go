package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

func apiMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /profile", ok)
	mux.Handle("GET /items/{id}", ok)
	mux.Handle("POST /login", ok)
	mux.Handle("GET /healthz", ok)
	return mux
}

// Global counter, route counters that replace it, exemptions.
func TestCounters(t *testing.T) {
	store := newKeyStore(t, nil)
	mw, err := httplimit.New(store, httplimit.Options{
		Limit: limiter.Limit{Uses: 3, Window: time.Minute},
		Routes: []httplimit.Rule{
			httplimit.Route("POST /login", limiter.Limit{Uses: 2, Window: 15 * time.Minute}),
			httplimit.Route("GET /items/{id}", limiter.Limit{Uses: 1, Window: time.Minute}),
			httplimit.Exempt("GET /healthz"),
		},
		Logger: discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, mw(apiMux()))
	steps := []struct {
		method, path string
		status       int
		key          string // "" when nothing is counted
		remaining    string
	}{
		{"GET", "/profile", 200, "http:*:127.0.0.1", "2"},
		{"GET", "/missing", 404, "http:*:127.0.0.1", "1"}, // unmatched paths share the global counter
		{"DELETE", "/profile", 405, "http:*:127.0.0.1", "0"},
		{"GET", "/profile", 429, "http:*:127.0.0.1", "0"},
		// The route's own counter replaces the exhausted global one.
		{"POST", "/login", 200, "http:POST /login:127.0.0.1", "1"},
		{"POST", "/login", 200, "http:POST /login:127.0.0.1", "0"},
		{"POST", "/login", 429, "http:POST /login:127.0.0.1", "0"},
		// One counter per pattern, not per path.
		{"GET", "/items/1", 200, "http:GET /items/{id}:127.0.0.1", "0"},
		{"GET", "/items/2", 429, "http:GET /items/{id}:127.0.0.1", "0"},
		// Exempt: not counted, no headers, whatever the other counters say.
		{"GET", "/healthz", 200, "", ""},
		{"GET", "/healthz", 200, "", ""},
	}
	for i, s := range steps {
		r := do(t, srv, s.method, s.path)
		key := store.lastKey()
		if r.status != s.status || key != s.key || r.header.Get("RateLimit-Remaining") != s.remaining {
			t.Errorf("step %d: %s %s = %d, key %q, remaining %q; want %d, %q, %q",
				i, s.method, s.path, r.status, key, r.header.Get("RateLimit-Remaining"), s.status, s.key, s.remaining)
		}
		if s.key == "" && len(rlHeaders(r.header)) != 0 {
			t.Errorf("step %d: exempt route has headers %v", i, rlHeaders(r.header))
		}
	}
}

// A request through the middleware and a wrapped handler counts once in
// each layer.
func TestTwoLayers(t *testing.T) {
	store := newKeyStore(t, nil)
	l, err := httplimit.NewLimiter(store, httplimit.Options{Limit: limiter.Limit{Uses: 10, Window: time.Minute}, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	report, err := l.Wrap(httplimit.Rule{Limit: limiter.Limit{Uses: 2, Window: time.Minute}}, ok)
	if err != nil {
		t.Fatal(err)
	}
	named, err := l.Wrap(httplimit.Rule{Pattern: "export", Limit: limiter.Limit{Uses: 1, Window: time.Minute}}, ok)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /report", report)
	mux.Handle("GET /export", named)
	srv := serve(t, l.Middleware(mux))

	for i, want := range []int{200, 200, 429} {
		r := do(t, srv, "GET", "/report")
		keys := store.allKeys()
		if r.status != want || len(keys) != 2 || keys[0] != "http:*:127.0.0.1" || keys[1] != "http:handler:GET /report:127.0.0.1" {
			t.Errorf("report %d: %d, keys %q; want %d and one count in each layer", i, r.status, keys, want)
		}
	}
	if r := do(t, srv, "GET", "/export"); r.status != 200 || store.allKeys()[1] != "http:handler:export:127.0.0.1" {
		t.Errorf("export: %d", r.status)
	}
	// Both layers counted every request that reached them: 4 of 10 used.
	if r := do(t, srv, "GET", "/nowhere"); r.header.Get("RateLimit-Remaining") != "5" {
		t.Errorf("global remaining %q, want 5", r.header.Get("RateLimit-Remaining"))
	}
}

// A refused request uses no quota: once the window has passed, the full
// quota is back however many refusals came in between.
func TestRefusedUseNoQuota(t *testing.T) {
	clock := limiter.NewFakeClock(t0)
	store := newKeyStore(t, clock)
	mw, err := httplimit.New(store, httplimit.Options{Limit: limiter.Limit{Uses: 2, Window: time.Minute}, Clock: clock, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, mw(ok))
	for i, s := range []struct {
		advance time.Duration
		n       int
		status  int
	}{
		{0, 2, 200},
		{0, 5, 429},
		{30 * time.Second, 5, 429},
		{30 * time.Second, 2, 200}, // a minute after the first two
		{0, 1, 429},
	} {
		clock.Advance(s.advance)
		for j := 0; j < s.n; j++ {
			if r := do(t, srv, "GET", "/"); r.status != s.status {
				t.Fatalf("step %d call %d: %d, want %d", i, j, r.status, s.status)
			}
		}
	}
}
