package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

func newConcStore(t *testing.T) (*limiter.Memory, *limiter.FakeClock) {
	t.Helper()
	clock := limiter.NewFakeClock(time.Unix(1_700_000_000, 0))
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return m, clock
}

func TestParseConcurrency(t *testing.T) {
	l, err := limiter.ParseLimit("concurrency:10/30s")
	want := limiter.ConcurrencyLimit(10, 30*time.Second)
	if err != nil || l != want {
		t.Fatalf("ParseLimit = %+v, %v; want %+v", l, err, want)
	}
	if s := l.String(); s != "concurrency:10/30s" {
		t.Fatalf("String = %q", s)
	}
	var ie *limiter.InputError
	if _, err := limiter.ParseLimit("concurrency:10/30s,burst=20"); !errors.As(err, &ie) || ie.Field != "burst" {
		t.Fatalf("a concurrency limit with a burst: %v; want an InputError naming burst", err)
	}
	bad := limiter.ConcurrencyLimit(10, time.Second)
	bad.Burst = 3
	m, _ := newConcStore(t)
	if _, err := m.ConsumeMany(t.Context(), []limiter.Entry{{Key: "k", Limit: bad}}); !errors.As(err, &ie) || ie.Field != "entries[0].limit.burst" {
		t.Fatalf("Burst on a concurrency limit: %v; want entries[0].limit.burst", err)
	}
	_, err = m.ConsumeMany(t.Context(), []limiter.Entry{{Key: "k", Limit: limiter.ConcurrencyLimit(2, time.Second), Cost: 1, Debit: true}})
	if !errors.As(err, &ie) || ie.Field != "entries[0].debit" {
		t.Fatalf("a debit on a concurrency limit: %v; want entries[0].debit", err)
	}
	big := limiter.ConcurrencyLimit(limiter.DefaultMaxLogUses+1, time.Second)
	if _, err := m.ConsumeMany(t.Context(), []limiter.Entry{{Key: "k", Limit: big}}); !errors.Is(err, limiter.ErrBound) {
		t.Fatalf("more slots than MaxLogUses: %v; want ErrBound", err)
	}
}

// Slots are taken up to N, refused with the wait until the soonest one
// reaches its TTL, freed by a release (once: a second call frees
// nothing more) and by their TTL.
func TestAcquireReleaseAndTTL(t *testing.T) {
	m, clock := newConcStore(t)
	ctx := t.Context()
	r1, v, err := limiter.Acquire(ctx, m, "tenant", 2, 10*time.Second)
	if err != nil || !v.Allowed || v.Remaining != 1 {
		t.Fatalf("first: %+v, %v", v, err)
	}
	clock.Advance(2 * time.Second)
	r2, v, err := limiter.Acquire(ctx, m, "tenant", 2, 10*time.Second)
	if err != nil || !v.Allowed || v.Remaining != 0 {
		t.Fatalf("second: %+v, %v", v, err)
	}
	clock.Advance(time.Second)
	r3, v, err := limiter.Acquire(ctx, m, "tenant", 2, 10*time.Second)
	if err != nil || v.Allowed || v.RetryAfter != 7*time.Second {
		t.Fatalf("third: %+v, %v; want refused for 7s (the first slot's TTL)", v, err)
	}
	if err := r3(ctx); err != nil {
		t.Fatalf("a refusal's release: %v", err)
	}
	if err := r1(ctx); err != nil {
		t.Fatal(err)
	}
	r4, v, _ := limiter.Acquire(ctx, m, "tenant", 2, 10*time.Second)
	if !v.Allowed {
		t.Fatalf("after a release: %+v; want allowed", v)
	}
	// Releasing r1 again must not free r2's or r4's slot.
	if err := r1(ctx); err != nil {
		t.Fatal(err)
	}
	if _, v, _ := limiter.Acquire(ctx, m, "tenant", 2, 10*time.Second); v.Allowed {
		t.Fatalf("a second release of one slot freed another: %+v", v)
	}
	// r2 was taken at +2s: its TTL ends at +12s; r4 at +3s, ends at +13s.
	clock.Advance(9 * time.Second) // +12s
	_, v, _ = limiter.Acquire(ctx, m, "tenant", 2, 10*time.Second)
	if !v.Allowed {
		t.Fatalf("after the TTL of a vanished holder: %+v; want allowed", v)
	}
	_ = r2
	_ = r4
}

// A concurrency limit and a sliding log of the same key and window are
// two counters.
func TestConcurrencyApartFromSlidingLog(t *testing.T) {
	m, _ := newConcStore(t)
	ctx := t.Context()
	log := limiter.Limit{Uses: 1, Window: time.Minute}
	if v, _ := limiter.Consume(ctx, m, "k", log); !v.Allowed {
		t.Fatal("log refused")
	}
	if _, v, err := limiter.Acquire(ctx, m, "k", 1, time.Minute); err != nil || !v.Allowed {
		t.Fatalf("a slot after a sliding-log use of the same key and window: %+v, %v", v, err)
	}
	if v, _ := limiter.Consume(ctx, m, "k", log); v.Allowed {
		t.Fatal("the log forgot its use")
	}
	if m.Len() != 2 {
		t.Fatalf("Len = %d, want 2 counters", m.Len())
	}
}

// Held slots move with Export and Import (a hand-off), ids and all: the
// release of a slot taken on the old store frees it on the new one.
func TestConcurrencySlotsMove(t *testing.T) {
	from, _ := newConcStore(t)
	to, clock := newConcStore(t)
	ctx := limiter.WithRelease(t.Context())
	l := limiter.ConcurrencyLimit(2, 10*time.Second)
	_, rs, err := from.ConsumeReceipts(ctx, []limiter.Entry{{Key: "k", Limit: l}}, true)
	if err != nil || len(rs) != 1 {
		t.Fatalf("%v, %d receipts", err, len(rs))
	}
	if _, v, _ := limiter.Acquire(ctx, from, "k", 2, 10*time.Second); !v.Allowed {
		t.Fatal("second slot refused")
	}
	states := from.Export(func(string) bool { return true }, true)
	if len(states) != 1 || states[0].Algorithm != limiter.Concurrency || len(states[0].Log) != 2 {
		t.Fatalf("export: %+v", states)
	}
	if err := limiter.CheckState(&states[0], limiter.Bounds{}); err != nil {
		t.Fatalf("CheckState of an export: %v", err)
	}
	to.Import(states)
	if _, v, _ := limiter.Acquire(ctx, to, "k", 2, 10*time.Second); v.Allowed {
		t.Fatal("the new store forgot the held slots")
	}
	if err := to.ReleaseReceipts(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if _, v, _ := limiter.Acquire(ctx, to, "k", 2, 10*time.Second); !v.Allowed {
		t.Fatal("a release after the move did not free its slot")
	}
	clock.Advance(10 * time.Second)
	to.Sweep()
	if to.Len() != 0 {
		t.Fatalf("Len after every TTL = %d, want 0 (the slots expire)", to.Len())
	}
	// A slot aged ahead of the store's clock by more than a TTL is not
	// one a store exported.
	bad := limiter.CounterState{Key: "k", Algorithm: limiter.Concurrency, Window: time.Second, Log: []limiter.LogUse{{At: 2_000_000, Cost: 1, ID: 1}}}
	var ie *limiter.InputError
	if err := limiter.CheckState(&bad, limiter.Bounds{}); !errors.As(err, &ie) || ie.Field != "log[0].age" {
		t.Fatalf("CheckState of a slot far ahead: %v", err)
	}
}

type noReleaseStore struct{ limiter.Store }

func (s noReleaseStore) ConsumeMany(ctx context.Context, es []limiter.Entry) (limiter.Verdict, error) {
	v, err := s.Store.ConsumeMany(context.Background(), es) // drops WithRelease
	return v, err
}

func TestAcquireWithoutReleaseIsUnsupported(t *testing.T) {
	m, _ := newConcStore(t)
	release, v, err := limiter.Acquire(t.Context(), noReleaseStore{m}, "k", 1, time.Second)
	var ue *limiter.UnsupportedError
	if !errors.Is(err, limiter.ErrNotSupported) || !errors.As(err, &ue) || !v.Allowed || release == nil {
		t.Fatalf("Acquire on a store without Release: %+v, %v", v, err)
	}
	if _, _, err := limiter.AcquireLimit(t.Context(), m, "k", limiter.Limit{Uses: 1, Window: time.Second}); !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("AcquireLimit with a sliding log: %v; want ErrInvalid", err)
	}
}
