package owner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// The reset rule as a step table.
func TestResetRule(t *testing.T) {
	for i, c := range []struct {
		hops         uint32
		given, owner string
		known        bool
		want         string
		what         string
	}{
		{0, "", "b", true, "b", "made here, owned by b: to b"},
		{0, "", "a", true, "", "made here, owned here: here"},
		{0, "c", "a", true, "c", "owned here but given to c: to c"},
		{1, "", "a", true, "", "forwarded, owned here: here"},
		{1, "c", "a", true, "c", "forwarded, given to c: to c"},
		{1, "", "b", true, "b", "forwarded, the ring gives it to b: to b"},
		{1, "", "b", false, "", "forwarded to a node whose ring names an unknown owner: here"},
		{maxHops, "c", "b", true, "", "last hop: here"},
	} {
		if got := resetRule("a", c.hops, c.given, c.owner, c.known); got != c.want {
			t.Errorf("step %d (%s): resetRule = %q, want %q", i, c.what, got, c.want)
		}
	}
}

// A reset made on a node that does not own the key forgets the counter at
// its owner and at the owner's successor (a replica), drops the refusal
// the asking node cached, and leaves the key's other windows alone.
func TestResetThroughNonOwner(t *testing.T) {
	rs := startRoutersWith(t, func(c *Config) { c.Replication = 1; c.ReplicationDelay = time.Millisecond }, "a", "b", "c")
	a, b := rs["a"], rs["b"]
	ctx := context.Background()
	k := keyOwnedBy(t, a, "b", "reset")
	succ, err := a.ring().Successors(k, 2)
	if err != nil {
		t.Fatal(err)
	}
	holder := rs[succ[1]]
	l := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 2, Window: time.Minute}
	other := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1, Window: time.Minute}
	for _, lim := range []limiter.Limit{l, l, other} {
		if v, err := limiter.Consume(ctx, a, k, lim); err != nil || !v.Allowed {
			t.Fatalf("filling: %+v, %v", v, err)
		}
	}
	c := rs["c"]
	for _, r := range []*Router{a, c} {
		if v, _ := limiter.Consume(ctx, r, k, l); v.Allowed {
			t.Fatal("a third use of 2 was allowed")
		}
		if _, ok := r.refusals.GetAny([]limiter.Entry{{Key: k, Limit: l}}, r.engine.Now()); !ok {
			t.Fatalf("%s did not cache the owner's refusal (the checks below would prove nothing)", r.self)
		}
	}
	waitIdle(t, b)
	if _, ok := holder.replicas.ExportCounter(k, l.Algorithm, l.Window); !ok {
		t.Fatalf("the successor %s holds no replica before the reset", succ[1])
	}

	if err := a.Reset(ctx, []string{k}, l); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.engine.ExportCounter(k, l.Algorithm, l.Window); ok {
		t.Fatal("the owner still holds the counter after the reset")
	}
	if _, ok := b.engine.ExportCounter(k, other.Algorithm, other.Window); !ok {
		t.Fatal("the reset of one window dropped the key's other window")
	}
	waitIdle(t, b)
	if _, ok := holder.replicas.ExportCounter(k, l.Algorithm, l.Window); ok {
		t.Fatalf("the successor %s still holds the replica after the reset", succ[1])
	}
	if _, ok := c.refusals.GetAny([]limiter.Entry{{Key: k, Limit: l}}, c.engine.Now()); ok {
		t.Fatal("c still caches a refusal of the key after the reset (made through a)")
	}
	if v, err := limiter.Consume(ctx, a, k, l); err != nil || !v.Allowed || v.Remaining != 1 {
		t.Fatalf("a use through a after the reset: %+v, %v; want allowed with 1 left (a's cached refusal dropped)", v, err)
	}

	// Every window; idempotent.
	for range 2 {
		if err := c.Reset(ctx, []string{k}); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.engine.Len(); n != 0 {
		t.Fatalf("the owner holds %d counters after a reset of every window", n)
	}
	if err := a.Reset(ctx, []string{""}); err == nil {
		t.Fatal("a reset of an empty key was accepted")
	}
}

// State of a reset counter that arrives after the reset, by hand-off or
// in a fetch answer, is dropped: a late hand-off cannot bring the count
// back. Other counters of a hand-off still land.
func TestResetDropsLateState(t *testing.T) {
	rs := startRouters(t, "a", "b")
	a, b := rs["a"], rs["b"]
	ctx := context.Background()
	k := keyOwnedBy(t, a, "b", "late")
	k2 := keyOwnedBy(t, a, "b", "other")
	l := limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: time.Hour}
	if err := a.Reset(ctx, []string{k}, l); err != nil {
		t.Fatal(err)
	}
	// The state a previous owner would hand off: the counter full.
	old := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer old.Close()
	for _, key := range []string{k, k2} {
		if _, err := limiter.Consume(ctx, old, key, l); err != nil {
			t.Fatal(err)
		}
	}
	states := old.Export(func(string) bool { return true }, false)
	if len(states) != 2 {
		t.Fatalf("exported %d states, want 2", len(states))
	}
	if _, err := b.ServeHandOff(StateBatch{From: "a", States: states}); err != nil {
		t.Fatal(err)
	}
	if v, _ := limiter.Peek(ctx, b, k, l); !v.Allowed {
		t.Fatal("a hand-off that arrived after the reset brought the count back")
	}
	if v, _ := limiter.Peek(ctx, b, k2, l); v.Allowed {
		t.Fatal("the hand-off's state of another key was dropped too")
	}
	// A fetch answer is filtered the same way.
	if got := b.validStates(old.Export(func(string) bool { return true }, false), "a"); len(got) != 1 || got[0].Key != k2 {
		t.Fatalf("a fetch answer after the reset keeps %d states, want only the other key's", len(got))
	}
}

// An owner that does not answer fails the reset (wrapping ErrUnavailable,
// naming it) rather than report it done; the keys this node counts are
// reset all the same.
func TestResetReportsAnUnreachableOwner(t *testing.T) {
	net := newMemNet()
	net.setDown("b", true)
	rg, err := ring.New([]string{"a", "b"}, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	engine := limiter.NewMemory(limiter.MemoryConfig{})
	defer engine.Close()
	a, err := New(Config{
		Self: "a", SelfAddr: "mem:a", Members: &staticMembers{ring: rg, addrs: map[string]string{"a": "mem:a", "b": "mem:b"}}, Engine: engine,
		Peers: net.peers("a"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		FetchTimeout: 10 * time.Millisecond, ForwardTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	alone, err := ring.New([]string{"a"}, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a.RingChanged(nil, alone)
	a.RingChanged(alone, rg)
	a.Start()
	net.add("a", a)
	mine, theirs := keyOwnedBy(t, a, "a", "mine"), keyOwnedBy(t, a, "b", "theirs")
	l := limiter.Limit{Uses: 1, Window: time.Hour}
	if _, err := limiter.Consume(context.Background(), engine, mine, l); err != nil {
		t.Fatal(err)
	}
	err = a.Reset(context.Background(), []string{mine, theirs}, l)
	if !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "reset at b") {
		t.Fatalf("reset with its owner b down: %v; want an error naming b", err)
	}
	if _, ok := engine.ExportCounter(mine, l.Algorithm, l.Window); ok {
		t.Fatal("the key a counts was not reset")
	}
}
