package cluster

import (
	"context"
	"testing"
	"time"
)

// The majority rule judges probe answers by the membership's clock: an
// answer counts for freshProbes intervals after its probe was sent, then
// the verdict changes at the next evaluation, without any ring change,
// and flips says so. Real memberlist (3 nodes, one closed), no prober
// goroutine: the answers are set by hand, the clock is injected.
func TestMajorityAnswersAgeOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := func(name string, join ...string) *Cluster {
		c, err := Start(ctx, Config{Name: name, GossipAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:1", Profile: ProfileLocal, Join: join})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a := start("a")
	start("b", a.Local().GossipAddr)
	d := start("d", a.Local().GossipAddr)
	waitUntil(t, "a to see 3 alive", func() bool { return a.Ring().Len() == 3 })
	d.Close()
	waitUntil(t, "a to see d dead", func() bool {
		m, ok := a.Member("d")
		return ok && m.State == StateDead && a.Ring().Len() == 2
	})

	now := time.Unix(1000, 0)
	m := NewRouting()
	m.now = func() time.Time { return now }
	p := &prober{fresh: freshProbes * a.ProbeInterval(), last: map[string]time.Time{"b": now}}
	m.probe.Store(p)
	m.Set(a)
	live := a.Ring()

	if rg := m.Route(live); rg != live {
		t.Fatalf("b answered just now: a reaches 2 of 3 and routes by the live ring %v, got %v", live, rg)
	}
	drainFlips(m.flips)
	now = now.Add(p.fresh - time.Millisecond)
	m.evaluate(true)
	if rg := m.Route(live); rg != live {
		t.Fatalf("b's answer is %v old, younger than %v: want the live ring, got %v", p.fresh-time.Millisecond, p.fresh, rg)
	}
	select {
	case <-m.flips:
		t.Fatal("flips signalled though the verdict did not change")
	default:
	}
	now = now.Add(time.Millisecond) // the probe round's evaluation
	m.evaluate(true)
	rg := m.Route(live)
	if rg.Len() != 3 || !rg.Has("d") {
		t.Fatalf("b's answer aged out: a reaches 1 of 3 and must route by every member it knows, got %v", rg)
	}
	select {
	case <-m.flips:
	default:
		t.Fatal("the verdict changed but flips was not signalled: the router would keep its ring")
	}
	if a.Ring() != live {
		t.Fatal("the live ring changed meanwhile: the test no longer shows a change without one")
	}
	// A fresh answer brings the majority back.
	p.mu.Lock()
	p.last["b"] = now
	p.mu.Unlock()
	m.evaluate(true)
	if rg := m.Route(live); rg != live {
		t.Fatalf("b answered again: want the live ring, got %v", rg)
	}
}

func drainFlips(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
