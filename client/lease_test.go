package client_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
)

// Two clients, each hammering one hot key from several goroutines, get
// leases from its owner and decide most calls locally; no span shorter
// than the window holds more admissions than the limit (the calls are
// timed by one process clock, as bench's check does), with and without
// leases. The limit is met within the run, so the edge is exercised.
func TestLeasesFleetExact(t *testing.T) {
	tc := startCluster(t, 3, nil)
	for _, leases := range []bool{true, false} {
		on := leases
		lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 300, Window: 500 * time.Millisecond}
		key := "lease-hot-" + map[bool]string{true: "on", false: "off"}[on]
		var cs []*client.Client
		for range 2 {
			c := dialCluster(t, tc, func(cfg *client.Config) { cfg.Leases = &on })
			waitFor(t, "the client's ring", c.Routing)
			cs = append(cs, c)
		}
		type adm struct{ sent, recv time.Duration }
		var mu sync.Mutex
		var all []adm
		start := time.Now()
		var wg sync.WaitGroup
		for _, c := range cs {
			for range 4 {
				wg.Go(func() {
					var mine []adm
					for time.Since(start) < 1200*time.Millisecond {
						sent := time.Since(start)
						v, err := c.ConsumeMany(context.Background(), []limiter.Entry{{Key: key, Limit: lim}})
						if err != nil {
							t.Errorf("consume: %v", err)
							return
						}
						if v.Allowed {
							mine = append(mine, adm{sent, time.Since(start)})
						}
					}
					mu.Lock()
					all = append(all, mine...)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		slices.SortFunc(all, func(a, b adm) int { return int(a.sent - b.sent) })
		for i := range all {
			end := all[i].sent + lim.Window
			n := int64(0)
			for j := i; j < len(all) && all[j].sent < end; j++ {
				if all[j].recv < end {
					n++
				}
			}
			if n > lim.Uses {
				t.Fatalf("leases %v: %d admissions within one window (limit %d)", on, n, lim.Uses)
			}
		}
		var local int64
		for _, c := range cs {
			local += c.LeaseStats().Local
		}
		t.Logf("leases %v: %d admitted, %d decided locally", on, len(all), local)
		if on && local == 0 {
			t.Fatalf("no call was decided from a lease")
		}
		if on {
			// The owners count the leases and, once the clients gave them
			// back (Close), the uses made under them.
			for _, c := range cs {
				c.Close()
			}
			granted, used := 0.0, 0.0
			for _, n := range tc.live() {
				granted += gathered(t, n, "ringlimit_leases_granted_total")
				used += gathered(t, n, "ringlimit_lease_uses_total")
			}
			if granted < 1 || used < float64(local) {
				t.Fatalf("nodes' metrics: %v leases granted, %v uses returned; the clients decided %d locally", granted, used, local)
			}
		}
		if !on && local != 0 {
			t.Fatalf("leases off, yet %d calls decided from leases", local)
		}
		if int64(len(all)) < lim.Uses {
			t.Fatalf("leases %v: %d admitted in 1.2 s, fewer than the limit %d: the edge was not reached", on, len(all), lim.Uses)
		}
	}
}

// gathered reads one unlabelled series from a node's metrics (0 when absent).
func gathered(t *testing.T, n *ringlimit.Node, name string) float64 {
	t.Helper()
	mfs, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}

// A node about to refuse a key whose uses are out on a fleet client's
// lease recalls it over the LeaseRecalls stream the client keeps open (it
// does not wait for the lease to end): the call that fits once the unused
// uses are back is allowed, the next one refused: exactly the limit.
func TestLeasesRecalledFromClient(t *testing.T) {
	tc := startCluster(t, 3, nil)
	c := dialCluster(t, tc, nil)
	waitFor(t, "the client's ring", c.Routing)
	lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 1000, Window: 10 * time.Second}
	ctx := context.Background()
	for attempt := range 5 {
		key := fmt.Sprintf("recall-client-%d", attempt)
		var own *ringlimit.Node
		for _, n := range tc.live() {
			if name, err := n.Owner(key); err == nil && name == n.Name() {
				own = n
			}
		}
		if own == nil {
			t.Fatalf("no node owns %q", key)
		}
		before := gathered(t, own, "ringlimit_leases_recalled_total")
		held := c.LeaseStats()
		made := int64(0)
		deadline := time.Now().Add(5 * time.Second)
		for s := c.LeaseStats(); s.Local == held.Local || s.Granted-s.Returned == held.Granted-held.Returned; s = c.LeaseStats() {
			if time.Now().After(deadline) || made > 600 {
				t.Fatalf("the client got no lease in %d calls", made)
			}
			// 8 calls at once: a client asks for a lease only for a key
			// called several times within one round trip.
			var wg sync.WaitGroup
			var mu sync.Mutex
			for range 8 {
				wg.Go(func() {
					v, err := c.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim}})
					if err != nil || !v.Allowed {
						t.Errorf("a call under the limit: %+v, %v", v, err)
						return
					}
					mu.Lock()
					made++
					mu.Unlock()
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
		}
		v, err := own.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim, Cost: lim.Uses - made}})
		if err != nil || !v.Allowed {
			t.Fatalf("the rest of the limit (%d) refused after %d calls: %+v, %v", lim.Uses-made, made, v, err)
		}
		if v, err := own.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim}}); err != nil || v.Allowed {
			t.Fatalf("a call past the limit: %+v, %v", v, err)
		}
		if gathered(t, own, "ringlimit_leases_recalled_total") > before {
			if got := c.LeaseStats().Recalled; got < 1 {
				t.Fatalf("the node recalled a lease, the client counted %d recalls", got)
			}
			return
		}
		t.Logf("attempt %d: the lease ended before the node's call (a busy machine); again", attempt)
	}
	t.Fatal("in 5 attempts the node never recalled a lease from the client")
}
