package httplimit_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

func Example() {
	// A fixed clock keeps the printed Retry-After exact; leave it out in
	// real code.
	clock := limiter.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "token") })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

	mw, err := httplimit.New(store, httplimit.Options{
		Limit: limiter.Limit{Uses: 100, Window: time.Minute}, // every other route
		Routes: []httplimit.Rule{
			httplimit.Route("POST /login", limiter.Limit{Uses: 2, Window: 15 * time.Minute}),
			httplimit.Exempt("GET /healthz"),
		},
		Logger: slog.New(slog.DiscardHandler),
		Clock:  clock,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(mw(mux))
	defer srv.Close()

	for range 3 {
		resp, err := http.Post(srv.URL+"/login", "text/plain", nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Remaining"), resp.Header.Get("Retry-After"), string(body))
	}

	_, err = httplimit.New(store, httplimit.Options{Limit: limiter.Limit{Uses: 100, Window: time.Minute}, IPv6Prefix: 129})
	fmt.Println(err)
	// Output:
	// 200 1  token
	// 200 0  token
	// 429 0 900 {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded","instance":"/login"}
	// limiter: IPv6Prefix: must be from 1 to 128, got 129
}

// A new login limit runs in shadow mode first: every request is served,
// and ShadowStats (and the log) say how many it would have refused.
func ExampleRule_shadow() {
	clock := limiter.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "token") })

	l, err := httplimit.NewLimiter(store, httplimit.Options{
		Limit: limiter.Limit{Uses: 100, Window: time.Minute},
		Routes: []httplimit.Rule{
			{Pattern: "POST /login", Limit: limiter.Limit{Uses: 2, Window: 15 * time.Minute}, Shadow: true},
		},
		Logger: slog.New(slog.DiscardHandler),
		Clock:  clock,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(l.Middleware(mux))
	defer srv.Close()
	for range 3 {
		resp, err := http.Post(srv.URL+"/login", "text/plain", nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%d remaining %s, Retry-After %q\n", resp.StatusCode, resp.Header.Get("RateLimit-Remaining"), resp.Header.Get("Retry-After"))
	}
	fmt.Printf("%+v\n", l.ShadowStats())
	// Output:
	// 200 remaining 1, Retry-After ""
	// 200 remaining 0, Retry-After ""
	// 200 remaining 0, Retry-After ""
	// {Calls:3 WouldRefuse:1}
}

// At most 2 report requests of a client in flight: a request holds a
// slot while its handler runs and gives it back when the handler returns.
func ExampleConcurrency() {
	store := limiter.NewMemory(limiter.MemoryConfig{})
	defer store.Close()
	mw, err := httplimit.New(store, httplimit.Options{
		Limit: limiter.Limit{Uses: 100, Window: time.Minute},
		Routes: []httplimit.Rule{
			// A slot of a crashed process frees itself after 5 minutes.
			httplimit.Concurrency("GET /reports/{id}", 2, 5*time.Minute),
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /reports/{id}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "report") })
	srv := httptest.NewServer(mw(mux))
	defer srv.Close()
	for range 3 { // one after the other: each gives its slot back
		resp, err := http.Get(srv.URL + "/reports/7")
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Limit"), resp.Header.Get("RateLimit-Remaining"))
	}
	// Output:
	// 200 2 1
	// 200 2 1
	// 200 2 1
}
