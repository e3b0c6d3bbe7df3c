package client_test

import (
	"context"
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
