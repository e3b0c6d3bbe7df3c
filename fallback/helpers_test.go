package fallback_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// slowStore is a real limiter.Memory behind a switch: it answers at once,
// stalls until resumed (then counts, answering late), or fails. A stalled
// call ignores its context, like a store stuck in a network write.
type slowStore struct {
	mem     *limiter.Memory
	entered atomic.Int64 // calls that reached the store

	mu     sync.Mutex
	gate   chan struct{}
	fail   error
	events []string
}

func newSlowStore(t *testing.T) *slowStore {
	t.Helper()
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	s := &slowStore{mem: m}
	t.Cleanup(s.resume) // a failed test must not leave calls stalled
	return s
}

// stall makes later calls wait until resume.
func (s *slowStore) stall() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

// resume lets stalled calls (and later ones) through.
func (s *slowStore) resume() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

func (s *slowStore) failWith(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *slowStore) event(e string) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *slowStore) Events() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.events, ",")
}

func (s *slowStore) wait() error {
	s.entered.Add(1)
	s.mu.Lock()
	g, err := s.gate, s.fail
	s.mu.Unlock()
	if g != nil {
		<-g
	}
	return err
}

func (s *slowStore) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	if err := s.wait(); err != nil {
		return limiter.Verdict{}, err
	}
	v, err := s.mem.ConsumeMany(ctx, entries)
	if err == nil && v.Allowed {
		s.event("consume")
	}
	if rel := v.Release; rel != nil {
		v.Release = func(ctx context.Context) error {
			s.event("release")
			return rel(ctx)
		}
	}
	return v, err
}

func (s *slowStore) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	if err := s.wait(); err != nil {
		return limiter.Verdict{}, err
	}
	return s.mem.PeekMany(ctx, entries)
}

func (s *slowStore) Close() error {
	s.event("close")
	return s.mem.Close()
}

// remaining peeks the Memory directly: the uses left after one more call.
func (s *slowStore) remaining(t *testing.T, key string, l limiter.Limit) int64 {
	t.Helper()
	v, err := limiter.Peek(context.Background(), s.mem, key, l)
	if err != nil {
		t.Fatalf("peek %q: %v", key, err)
	}
	return v.Remaining
}

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

func wantLines(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log lines:\n got  %q\n want %q", got, want)
	}
}

var minute = limiter.Limit{Uses: 3, Window: time.Minute}

func ctx() context.Context { return context.Background() }

var discard = slog.New(slog.DiscardHandler)
