package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// serveOne runs h on one request from the test client and returns the
// recorded answer; a panic of h is recovered and reported.
func serveOne(h http.Handler, method, path string, header ...string) (rec *httptest.ResponseRecorder, panicked bool) {
	rec = httptest.NewRecorder()
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = "192.0.2.7:4321"
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	defer func() { panicked = recover() != nil }()
	h.ServeHTTP(rec, req)
	return rec, false
}

// A Concurrency rule holds a slot while the handler runs: at most n
// requests of a client are in flight; one returning (or panicking) frees
// its slot for the next.
func TestConcurrencyRule(t *testing.T) {
	store := newKeyStore(t, limiter.NewFakeClock(t0))
	mw, err := httplimit.New(store, httplimit.Options{
		Limit: limiter.Limit{Uses: 1000, Window: time.Minute},
		Routes: []httplimit.Rule{
			httplimit.Concurrency("GET /work", 2, time.Minute),
			httplimit.Concurrency("GET /panic", 1, time.Minute),
		},
		Logger: discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	finish := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Block") != "" {
			started <- struct{}{}
			<-finish
		}
	})
	mux.HandleFunc("GET /panic", func(http.ResponseWriter, *http.Request) { panic("handler failed") })
	h := mw(mux)

	var wg sync.WaitGroup
	done := make(chan struct{}, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rec, _ := serveOne(h, "GET", "/work", "X-Block", "1"); rec.Code != 200 {
				t.Errorf("a request in flight: %d", rec.Code)
			}
			done <- struct{}{}
		}()
		<-started
	}
	rec, _ := serveOne(h, "GET", "/work")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("a third request with two in flight: %d, Retry-After %q; want 429 after the 60 s TTL", rec.Code, rec.Header().Get("Retry-After"))
	}
	finish <- struct{}{} // one of the two returns...
	<-done               // ...and its middleware gave the slot back
	if rec, _ := serveOne(h, "GET", "/work"); rec.Code != 200 || rec.Header().Get("RateLimit-Remaining") != "0" {
		t.Fatalf("with one request left in flight: %d (remaining %q); want 200 with 0 left", rec.Code, rec.Header().Get("RateLimit-Remaining"))
	}
	close(finish)
	wg.Wait()
	// A handler that panics gives its slot back too.
	for i := range 3 {
		rec, panicked := serveOne(h, "GET", "/panic")
		if !panicked || rec.Code != 200 {
			t.Fatalf("panicking request %d: code %d, panicked %v; want the panic through, its slot given back", i+1, rec.Code, panicked)
		}
	}
}
