package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Bad debits and bursts are refused with an *InputError naming the field,
// before anything is counted.
func TestDebitAndBurstInput(t *testing.T) {
	tb := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 10, Window: time.Second}
	log := limiter.Limit{Uses: 10, Window: time.Second}
	for _, c := range []struct {
		name    string
		entries []limiter.Entry
		field   string
		bound   bool
	}{
		{"negative burst", []limiter.Entry{{Key: "k", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1, Window: time.Second, Burst: -1}}}, "entries[0].limit.burst", false},
		{"burst on a sliding log", []limiter.Entry{{Key: "k", Limit: limiter.Limit{Uses: 1, Window: time.Second, Burst: 3}}}, "entries[0].limit.burst", false},
		{"burst on a sliding window", []limiter.Entry{{Key: "k", Limit: limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 1, Window: time.Second, Burst: 3}}}, "entries[0].limit.burst", false},
		{"cost above the burst", []limiter.Entry{{Key: "k", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 10, Window: time.Second, Burst: 2}, Cost: 3}}, "entries[0].cost", false},
		{"debit with a negative cost", []limiter.Entry{{Key: "k", Limit: tb, Cost: -1, Debit: true}}, "entries[0].cost", false},
		{"debit above MaxDebit", []limiter.Entry{{Key: "k", Limit: tb, Cost: limiter.DefaultMaxDebit + 1, Debit: true}}, "entries[0].cost", true},
		{"sliding-log debit above MaxLogUses", []limiter.Entry{{Key: "k", Limit: log, Cost: limiter.DefaultMaxLogUses + 1, Debit: true}}, "entries[0].cost", true},
		{"debit after a consume", []limiter.Entry{{Key: "a", Limit: tb}, {Key: "b", Limit: tb, Debit: true}}, "entries[1].debit", false},
		{"consume after a debit", []limiter.Entry{{Key: "a", Limit: tb, Debit: true}, {Key: "b", Limit: tb}}, "entries[1].debit", false},
	} {
		m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
		for _, call := range []func(context.Context, []limiter.Entry) (limiter.Verdict, error){m.ConsumeMany, m.PeekMany} {
			_, err := call(context.Background(), c.entries)
			var ie *limiter.InputError
			if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, limiter.ErrInvalid) || errors.Is(err, limiter.ErrBound) != c.bound {
				t.Errorf("%s: error %v, want an *InputError on %q (bound %v)", c.name, err, c.field, c.bound)
			}
		}
		if m.Len() != 0 {
			t.Errorf("%s: %d counters held after refused input", c.name, m.Len())
		}
		m.Close()
	}
	// A debit may pass Uses, and a cost up to the burst passes.
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer m.Close()
	for _, e := range []limiter.Entry{
		{Key: "d", Limit: tb, Cost: 1000, Debit: true},
		{Key: "l", Limit: log, Cost: limiter.DefaultMaxLogUses, Debit: true},
		{Key: "b", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1, Window: time.Second, Burst: 50}, Cost: 50},
	} {
		if _, err := m.ConsumeMany(context.Background(), []limiter.Entry{e}); err != nil {
			t.Errorf("%v: %v", e, err)
		}
	}
	if err := (limiter.Bounds{MaxDebit: 5}).Check([]limiter.Entry{{Key: "k", Limit: tb, Cost: 6, Debit: true}}); !errors.Is(err, limiter.ErrBound) {
		t.Errorf("Bounds{MaxDebit: 5} on a debit of 6: %v, want ErrBound", err)
	}
}

// A debit counts whatever the budget says, never carries a Release (the
// usage happened), and a peek of one records nothing.
func TestDebitRecordsAndHasNoRelease(t *testing.T) {
	clock := limiter.NewFakeClock(time.Unix(1700000000, 0))
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
	defer m.Close()
	ctx := limiter.WithRelease(context.Background())
	l := limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 3, Window: time.Hour}
	debit := []limiter.Entry{{Key: "k", Limit: l, Cost: 5, Debit: true}}
	if v, err := m.PeekMany(ctx, debit); err != nil || !v.Allowed || v.Remaining != 0 {
		t.Fatalf("peek of the debit: %+v, %v; want allowed, 0 left", v, err)
	}
	if v, err := m.PeekMany(ctx, []limiter.Entry{{Key: "k", Limit: l, Cost: 3}}); err != nil || !v.Allowed {
		t.Fatalf("after the peek of a debit: %+v, %v; want all 3 uses free", v, err)
	}
	v, err := m.ConsumeMany(ctx, debit)
	if err != nil || !v.Allowed || v.Release != nil {
		t.Fatalf("debit: %+v, %v; want allowed (not exceeded before), no Release", v, err)
	}
	v, err = m.ConsumeMany(ctx, debit)
	if err != nil || v.Allowed || v.RetryAfter <= 0 || v.Release != nil {
		t.Fatalf("second debit: %+v, %v; want refused (exceeded before) with a wait, no Release", v, err)
	}
	if _, rs, err := m.ConsumeReceipts(ctx, debit, true); err != nil || len(rs) != 0 {
		t.Fatalf("ConsumeReceipts of a debit: %d receipts, %v; want none", len(rs), err)
	}
	if v, _ := m.ConsumeMany(ctx, []limiter.Entry{{Key: "k", Limit: l}}); v.Allowed {
		t.Fatalf("a consume after the debits passed: %+v", v)
	}
}

// One counter named twice in a batch counts under the smaller burst.
func TestBurstTighterInABatch(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer m.Close()
	wide := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 2, Window: time.Hour, Burst: 10}
	narrow := wide
	narrow.Burst = 3
	v, err := m.ConsumeMany(context.Background(), []limiter.Entry{{Key: "k", Limit: wide, Cost: 2}, {Key: "k", Limit: narrow, Cost: 2}})
	if err != nil || v.Allowed {
		t.Fatalf("4 uses under bursts 10 and 3: %+v, %v; want refused", v, err)
	}
	v, err = m.ConsumeMany(context.Background(), []limiter.Entry{{Key: "k", Limit: wide, Cost: 2}, {Key: "k", Limit: narrow, Cost: 1}})
	if err != nil || !v.Allowed || v.Remaining != 0 {
		t.Fatalf("3 uses under bursts 10 and 3: %+v, %v; want allowed, 0 left", v, err)
	}
}
