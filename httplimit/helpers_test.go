package httplimit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// keyStore is a real limiter.Memory that remembers the keys it was asked
// about and can be switched to fail.
type keyStore struct {
	*limiter.Memory
	mu    sync.Mutex
	keys  []string
	names []string // the limits' names, as keys
	fail  error
}

func newKeyStore(t *testing.T, clock limiter.Clock) *keyStore {
	t.Helper()
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return &keyStore{Memory: m}
}

func (s *keyStore) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	s.mu.Lock()
	for _, e := range entries {
		s.keys = append(s.keys, e.Key)
		s.names = append(s.names, e.Limit.Name)
	}
	err := s.fail
	s.mu.Unlock()
	if err != nil {
		return limiter.Verdict{}, err
	}
	return s.Memory.ConsumeMany(ctx, entries)
}

func (s *keyStore) failWith(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

// lastKey returns the last key asked about and forgets them all.
func (s *keyStore) lastKey() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) == 0 {
		return ""
	}
	k := s.keys[len(s.keys)-1]
	s.keys = nil
	return k
}

// allNames returns the limit names asked about and forgets them.
func (s *keyStore) allNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.names
	s.names = nil
	return n
}

func (s *keyStore) allKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys
	s.keys = nil
	return k
}

// serve starts a real server for h.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, srv *httptest.Server, method, path string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

// ok answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "ok")
})

func newLogger() (*slog.Logger, *testenv.LogBuffer) {
	b := &testenv.LogBuffer{}
	h := slog.NewTextHandler(b, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}})
	return slog.New(h), b
}

var discard = slog.New(slog.DiscardHandler)

var errBoom = errors.New("redis: connection refused")

// headers picks the rate-limit headers of a response, "" for absent.
func rlHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for _, k := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		if v := h.Get(k); v != "" {
			out[k] = v
		}
	}
	return out
}
