package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// The middleware's own cost is BenchmarkMiddleware minus BenchmarkBare
// minus BenchmarkStore: see BENCHMARKS.md.

// benchWriter is a ResponseWriter reused across iterations, so the
// benchmark measures the handler, not a recorder's allocations.
type benchWriter struct{ h http.Header }

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(int)             {}

var bare = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "ok")
})

// never refuses within a benchmark run.
var benchLimit = limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1 << 40, Window: time.Second}

func runHandler(b *testing.B, h http.Handler) { runPath(b, h, "GET", "/profile") }

func runPath(b *testing.B, h http.Handler, method, path string) {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "203.0.113.9:4711"
	w := &benchWriter{h: http.Header{}}
	h.ServeHTTP(w, r)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

func BenchmarkBare(b *testing.B) { runHandler(b, bare) }

// BenchmarkStore is the Memory store alone, with the same key.
func BenchmarkStore(b *testing.B) {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer m.Close()
	e := []limiter.Entry{{Key: "http:*:203.0.113.9", Limit: benchLimit}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.ConsumeMany(ctx, e)
	}
}

func benchMiddleware(b *testing.B, opts httplimit.Options) { benchPath(b, opts, "/profile") }

func benchPath(b *testing.B, opts httplimit.Options, path string) {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer m.Close()
	opts.Limit = benchLimit
	mw, err := httplimit.New(m, opts)
	if err != nil {
		b.Fatal(err)
	}
	runPath(b, mw(bare), "GET", path)
}

// fixedStore answers every call with the same verdict at no cost. It is
// not a stand-in for a real store in any test: it only takes the store's
// time out of BenchmarkMiddlewareOnly, so that benchmark shows the
// middleware's own cost directly.
type fixedStore struct{ v limiter.Verdict }

func (s fixedStore) ConsumeMany(context.Context, []limiter.Entry) (limiter.Verdict, error) {
	return s.v, nil
}
func (s fixedStore) PeekMany(context.Context, []limiter.Entry) (limiter.Verdict, error) {
	return s.v, nil
}

func BenchmarkMiddlewareOnly(b *testing.B) {
	mw, err := httplimit.New(fixedStore{limiter.Verdict{Allowed: true, Remaining: 41, ResetAt: time.Now().Add(time.Minute)}},
		httplimit.Options{Limit: benchLimit})
	if err != nil {
		b.Fatal(err)
	}
	runHandler(b, mw(bare))
}

func BenchmarkMiddleware(b *testing.B) { benchMiddleware(b, httplimit.Options{}) }

// With routes: one more ServeMux lookup per request.
func BenchmarkMiddlewareRoutes(b *testing.B) {
	benchMiddleware(b, httplimit.Options{Routes: benchRoutes})
}

var benchRoutes = []httplimit.Rule{
	httplimit.Route("POST /login", benchLimit),
	httplimit.Route("GET /items/{id}", benchLimit),
	httplimit.Exempt("GET /healthz"),
}

// A request matching a route with a wildcard: the mux lookup.
func BenchmarkMiddlewareRouteHit(b *testing.B) {
	benchPath(b, httplimit.Options{Routes: benchRoutes}, "/items/7")
}

func BenchmarkMiddlewareAllHeaders(b *testing.B) {
	benchMiddleware(b, httplimit.Options{Headers: httplimit.HeadersStandard | httplimit.HeadersDraft | httplimit.HeadersLegacy})
}

func BenchmarkMiddlewareAPIKey(b *testing.B) {
	benchMiddleware(b, httplimit.Options{Key: func(r *http.Request) string { return "key-0123456789" }})
}
