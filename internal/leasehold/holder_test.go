package leasehold

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// grantAll is an owner that grants every ask in full and records what
// comes back.
type grantAll struct {
	mu      sync.Mutex
	next    uint64
	returns []Return
}

func (g *grantAll) Owner(string) (string, bool) { return "o", true }

func (g *grantAll) Exchange(_ context.Context, owner string, t Traffic) ([]Grant, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.returns = append(g.returns, t.Returns...)
	gs := make([]Grant, len(t.Asks))
	for i, a := range t.Asks {
		g.next++
		gs[i] = Grant{ID: g.next, Owner: owner, Key: a.Key, Limit: a.Limit, K: a.K, Length: a.Length}
	}
	return gs, nil
}

func (g *grantAll) returned() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.returns)
}

// Close gives every held lease back; Abandon, a crash, gives none (the
// owner counts them until they end): an in-process crash test that used
// Close would see returns a killed process never sends.
func TestHolderCloseReturnsAbandonDoesNot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stop    func(*Holder)
		returns bool
	}{
		{"Close", (*Holder).Close, true},
		{"Abandon", (*Holder).Abandon, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &grantAll{}
			h := NewHolder(HolderConfig{Name: "h", Transport: tr, Tick: time.Millisecond,
				Table: Config{Now: time.Now, Length: time.Minute, Hot: 2, HotSpan: time.Hour}})
			e := limiter.Entry{Key: "k", Limit: limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 1000, Window: time.Hour}}
			deadline := time.Now().Add(10 * time.Second)
			for h.Table().Held() == 0 {
				if time.Now().After(deadline) {
					h.Close()
					t.Fatal("no lease was granted within 10 s")
				}
				h.Decide(context.Background(), []limiter.Entry{e})
				time.Sleep(time.Millisecond)
			}
			if _, ok := h.Decide(context.Background(), []limiter.Entry{e}); !ok {
				t.Fatal("a held lease did not decide locally")
			}
			before := tr.returned()
			tc.stop(h)
			if got := tr.returned() - before; (got > 0) != tc.returns {
				t.Fatalf("%s sent %d returns; want returns: %v", tc.name, got, tc.returns)
			}
		})
	}
}

// A holder with no lease and nothing to send does not wake (issue 20's
// idle cost: a 2 ms ticker woke every node and client 500 times a second);
// an ask wakes it, and its traffic goes out within a Tick.
func TestHolderSleepsWhenIdle(t *testing.T) {
	tr := &grantAll{}
	h := NewHolder(HolderConfig{Name: "h", Transport: tr, Tick: time.Millisecond,
		Table: Config{Now: time.Now, Length: 20 * time.Millisecond, Hot: 2, HotSpan: time.Hour}})
	defer h.Close()
	time.Sleep(50 * time.Millisecond)
	if n := h.ticks.Load(); n != 0 {
		t.Fatalf("an idle holder looked at its traffic %d times in 50 ms; want 0", n)
	}
	e := limiter.Entry{Key: "k", Limit: limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 1000, Window: time.Hour}}
	for deadline := time.Now().Add(10 * time.Second); h.Table().Held() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no lease was granted within 10 s of the calls")
		}
		h.Decide(context.Background(), []limiter.Entry{e})
	}
	// The lease (20 ms) ends and goes back; then the holder sleeps again.
	for deadline := time.Now().Add(10 * time.Second); tr.returned() == 0 || h.Table().Held() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ended lease did not go back within 10 s")
		}
	}
	time.Sleep(5 * time.Millisecond) // the task's last look, if under way
	n := h.ticks.Load()
	time.Sleep(50 * time.Millisecond)
	if m := h.ticks.Load(); m != n {
		t.Fatalf("the holder kept waking with nothing held: %d looks in 50 ms", m-n)
	}
}
