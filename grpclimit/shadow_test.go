package grpclimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// nameStore is a real Memory that remembers the limit names asked about.
type nameStore struct {
	*limiter.Memory
	mu    sync.Mutex
	names []string
}

func (s *nameStore) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	s.mu.Lock()
	for _, e := range entries {
		s.names = append(s.names, e.Limit.Name)
	}
	s.mu.Unlock()
	return s.Memory.ConsumeMany(ctx, entries)
}

func (s *nameStore) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.names
	s.names = nil
	return n
}

// Shadow mode: a shadowed rule lets every call through, a spent quota in
// the metadata and no retry-after; the enforced global limit still
// refuses. Limit names are the rules' methods, "default" for the global.
func TestShadowAndNames(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := limiter.NewFakeClock(t0)
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	store := &nameStore{Memory: m}
	c := start(t, store, grpclimit.Options{
		Limit: limiter.Limit{Uses: 1, Window: time.Minute},
		Methods: []grpclimit.Rule{
			{Method: check, Limit: limiter.Limit{Uses: 2, Window: time.Minute}, Shadow: true},
		},
		Clock: clock,
	})
	for i, remaining := range []string{"1", "0", "0", "0"} {
		var hdr metadata.MD
		_, err := c.Check(ctx(t), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		if err != nil {
			t.Fatalf("Check %d: %v, want OK (shadowed rule)", i, err)
		}
		if got := hdr.Get("ratelimit-remaining"); len(got) != 1 || got[0] != remaining || len(hdr.Get("retry-after")) != 0 || hdr.Get("ratelimit-reset")[0] != "60" {
			t.Fatalf("Check %d: metadata %v, want remaining %s, reset 60, no retry-after", i, hdr, remaining)
		}
	}
	if got := store.take(); len(got) != 4 || got[0] != check || got[3] != check {
		t.Fatalf("limit names %q, want the method's four times", got)
	}
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		_, err := c.List(ctx(t), &healthpb.HealthListRequest{})
		if status.Code(err) != want {
			t.Fatalf("List %d: %v, want %v (the global limit is enforced)", i, err, want)
		}
	}
	if got := store.take(); len(got) != 2 || got[0] != "default" {
		t.Fatalf("limit names %q, want default twice", got)
	}
}

// Options.Shadow puts the global rule in shadow mode too, and
// ShadowStats counts.
func TestShadowEverything(t *testing.T) {
	store := newStore(t, nil)
	lim, err := grpclimit.New(store, grpclimit.Options{Limit: limiter.Limit{Uses: 1, Window: time.Minute}, Shadow: true, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	c := serveWith(t, lim)
	for i := range 3 {
		if _, err := c.Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("Check %d: %v, want OK (everything shadowed)", i, err)
		}
	}
	if st := lim.ShadowStats(); st.Calls != 3 || st.WouldRefuse != 2 {
		t.Fatalf("ShadowStats() = %+v, want 3 calls, 2 would refuse", st)
	}
}
