package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/examples/http/api"
	"github.com/ringlimit/ringlimit/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func call(t *testing.T, srv *httptest.Server, method, path, apiKey string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func TestAPI(t *testing.T) {
	store := limiter.NewMemory(limiter.MemoryConfig{})
	defer store.Close()
	h, err := api.New(store, api.Config{
		Global:  limiter.Limit{Uses: 3, Window: time.Minute},
		Login:   limiter.Limit{Uses: 2, Window: 15 * time.Minute},
		Reports: limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 2, Window: time.Hour},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	steps := []struct {
		method, path, key string
		status            int
		policy            string // RateLimit-Policy, "" for none
	}{
		{"POST", "/login", "", 200, `"POST /login";q=2;w=900`},
		{"POST", "/login", "", 200, `"POST /login";q=2;w=900`},
		{"POST", "/login", "", 429, `"POST /login";q=2;w=900`},
		// Each API key has its own quota; the login limit does not touch it.
		{"GET", "/reports", "acme", 200, `"reports";q=2;w=3600`},
		{"GET", "/reports", "acme", 200, `"reports";q=2;w=3600`},
		{"GET", "/reports", "acme", 429, `"reports";q=2;w=3600`},
		{"GET", "/reports", "globex", 200, `"reports";q=2;w=3600`},
		// No key: refused, not counted against anyone.
		{"GET", "/reports", "", 403, ""},
		// Everything else shares the global limit per IP.
		{"GET", "/hello", "", 200, `"default";q=3;w=60`},
		{"GET", "/nope", "", 404, `"default";q=3;w=60`},
		{"GET", "/hello", "", 200, `"default";q=3;w=60`},
		{"GET", "/hello", "", 429, `"default";q=3;w=60`},
		// Health checks are never limited.
		{"GET", "/healthz", "", 200, ""},
		{"GET", "/healthz", "", 200, ""},
	}
	for i, s := range steps {
		status, hdr := call(t, srv, s.method, s.path, s.key)
		if status != s.status || hdr.Get("RateLimit-Policy") != s.policy {
			t.Errorf("step %d: %s %s (key %q) = %d, policy %q; want %d, %q", i, s.method, s.path, s.key, status, hdr.Get("RateLimit-Policy"), s.status, s.policy)
		}
	}
}

func TestNewHandlerNilStore(t *testing.T) {
	if _, err := api.New(nil, api.Config{}); err == nil {
		t.Fatal("New(nil) = nil error")
	}
	srv := httptest.NewServer(api.NewHandler(nil))
	defer srv.Close()
	if status, _ := call(t, srv, "GET", "/hello", ""); status != 500 {
		t.Errorf("status %d, want 500", status)
	}
}
