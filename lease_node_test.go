package ringlimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/chaos"
	"github.com/ringlimit/ringlimit/limiter"
)

// leaseMetric reads one unlabelled series from a node's metrics (0 when
// absent).
func leaseMetric(t *testing.T, n *ringlimit.Node, name string) float64 {
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

// ownerAndOthers splits the cluster's nodes into key's owner and the rest.
func ownerAndOthers(t *testing.T, tc *testCluster, key string) (*ringlimit.Node, []*ringlimit.Node) {
	t.Helper()
	var o *ringlimit.Node
	var rest []*ringlimit.Node
	for _, n := range tc.live() {
		name, err := n.Owner(key)
		if err != nil {
			t.Fatal(err)
		}
		if name == n.Name() {
			o = n
		} else {
			rest = append(rest, n)
		}
	}
	if o == nil {
		t.Fatalf("no node owns %q", key)
	}
	return o, rest
}

// Embedded nodes hold leases of their peers' hot keys (issue #21): two
// nodes that do not own a key, each called for it from several
// goroutines, decide most calls from leases, and no span shorter than the
// window holds more admissions than the limit (the calls are timed by one
// process clock), with leases and without. The limit is met within the
// run, so the edge is exercised.
func TestLeasesEmbeddedExact(t *testing.T) {
	lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 300, Window: 500 * time.Millisecond}
	leaseHotKey(t, "embedded-hot", lim, func(calls []chaos.Call) chaos.Overshoot {
		return chaos.CheckOvershoot(calls, int(lim.Uses), lim.Window, nil)
	})
}

// leaseHotKey drives key from two nodes that do not own it, four
// goroutines each, for 1.2 s, with leases on and off (a subtest each),
// and fails when over finds any admission beyond the limit (the calls
// timed by one process clock), when leases on decide nothing locally or
// leases off decide anything locally, or when fewer than the limit's
// capacity were admitted (the edge not reached).
func leaseHotKey(t *testing.T, key string, lim limiter.Limit, over func([]chaos.Call) chaos.Overshoot) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("leases=%v", on), func(t *testing.T) {
			leases := on
			tc := startCluster(t, 3, func(c *ringlimit.Config) { c.Leases = &leases })
			own, others := ownerAndOthers(t, tc, key)
			var mu sync.Mutex
			var all []chaos.Call
			start := time.Now()
			var wg sync.WaitGroup
			for _, n := range others {
				for range 4 {
					wg.Go(func() {
						var mine []chaos.Call
						for time.Since(start) < 1200*time.Millisecond {
							sent := time.Since(start)
							v, err := n.ConsumeMany(context.Background(), []limiter.Entry{{Key: key, Limit: lim}})
							if err != nil {
								t.Errorf("consume: %v", err)
								return
							}
							if v.Allowed && v.Failure == nil {
								mine = append(mine, chaos.Call{Key: key, Node: n.Name(), Start: sent, End: time.Since(start), Answered: true, Allowed: true})
							}
						}
						mu.Lock()
						all = append(all, mine...)
						mu.Unlock()
					})
				}
			}
			wg.Wait()
			if o := over(all); o.Max > 0 {
				t.Fatalf("%d admissions beyond the limit %s in one span (of %d admitted)", o.Max, lim, len(all))
			}
			local := 0.0
			for _, n := range others {
				local += leaseMetric(t, n, "ringlimit_lease_local_decisions_total")
			}
			granted := leaseMetric(t, own, "ringlimit_leases_granted_total")
			t.Logf("%d admitted; %v decided from leases by the two holders; the owner granted %v", len(all), local, granted)
			if on && (local == 0 || granted == 0) {
				t.Fatalf("leases on: %v calls decided from leases, %v granted; want both above 0", local, granted)
			}
			if !on && local != 0 {
				t.Fatalf("leases off, yet %v calls decided from leases", local)
			}
			if int64(len(all)) < lim.Capacity() {
				t.Fatalf("%d admitted in 1.2 s, fewer than the capacity %d: the edge was not reached", len(all), lim.Capacity())
			}
		})
	}
}

// An owner about to refuse a key whose uses are out on a node's lease
// recalls it over Peer.Recall (it does not wait for the lease to end):
// the call that fits once the unused uses are back is allowed, the next
// one refused: exactly the limit, as without leases.
func TestLeasesRecalledFromNode(t *testing.T) {
	tc := startCluster(t, 3, nil)
	lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 1000, Window: 10 * time.Second}
	ctx := context.Background()
	for attempt := range 5 {
		key := fmt.Sprintf("recall-node-%d", attempt)
		own, others := ownerAndOthers(t, tc, key)
		h := others[0]
		before := leaseMetric(t, own, "ringlimit_leases_recalled_total")
		made := int64(0)
		deadline := time.Now().Add(5 * time.Second)
		for leaseMetric(t, h, "ringlimit_held_leases") < 1 || leaseMetric(t, h, "ringlimit_lease_local_decisions_total") == 0 {
			if time.Now().After(deadline) || made > 600 {
				t.Fatalf("the holder got no lease in %d calls", made)
			}
			made += hotRound(t, h, key, lim)
		}
		// The rest of the limit, in one call at the owner: it fits only
		// once the lease's unused uses are back.
		v, err := own.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim, Cost: lim.Uses - made}})
		if err != nil || !v.Allowed {
			t.Fatalf("the rest of the limit (%d) refused after %d calls: %+v, %v", lim.Uses-made, made, v, err)
		}
		if v, err := own.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim}}); err != nil || v.Allowed {
			t.Fatalf("a call past the limit: %+v, %v", v, err)
		}
		if leaseMetric(t, own, "ringlimit_leases_recalled_total") > before {
			if got := leaseMetric(t, h, "ringlimit_held_leases_recalled_total"); got < 1 {
				t.Fatalf("the owner recalled a lease, the holder counted %v recalls", got)
			}
			return
		}
		t.Logf("attempt %d: the lease ended before the owner's call (a busy machine); again", attempt)
	}
	t.Fatal("in 5 attempts the owner never recalled a lease from the holder node")
}

// A batch whose keys two owners count, one of them with uses out on a
// node's lease, is decided after the recall too (the part the calling
// owner counts itself recalls as a batch of one owner does): it fits
// exactly the rest of the limit.
func TestLeasesRecalledForSpreadBatch(t *testing.T) {
	tc := startCluster(t, 3, nil)
	lim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 1000, Window: 10 * time.Second}
	ctx := context.Background()
	for attempt := range 5 {
		key := fmt.Sprintf("recall-spread-%d", attempt)
		own, others := ownerAndOthers(t, tc, key)
		h := others[0]
		// A key of another owner, for the batch's second part.
		var other string
		for i := 0; other == ""; i++ {
			k := fmt.Sprintf("spread-other-%d-%d", attempt, i)
			if o, _ := own.Owner(k); o != own.Name() {
				other = k
			}
		}
		before := leaseMetric(t, own, "ringlimit_leases_recalled_total")
		made := int64(0)
		deadline := time.Now().Add(5 * time.Second)
		for leaseMetric(t, h, "ringlimit_held_leases") < 1 || leaseMetric(t, h, "ringlimit_lease_local_decisions_total") == 0 {
			if time.Now().After(deadline) || made > 600 {
				t.Fatalf("the holder got no lease in %d calls", made)
			}
			made += hotRound(t, h, key, lim)
		}
		batch := []limiter.Entry{{Key: key, Limit: lim, Cost: lim.Uses - made}, {Key: other, Limit: lim}}
		if v, err := own.ConsumeMany(ctx, batch); err != nil || !v.Allowed {
			t.Fatalf("a batch with the rest of the limit (%d) refused after %d calls: %+v, %v", lim.Uses-made, made, v, err)
		}
		if v, err := own.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim}}); err != nil || v.Allowed {
			t.Fatalf("a call past the limit: %+v, %v", v, err)
		}
		if leaseMetric(t, own, "ringlimit_leases_recalled_total") > before {
			return
		}
		t.Logf("attempt %d: the lease ended before the owner's call (a busy machine); again", attempt)
	}
	t.Fatal("in 5 attempts the owner never recalled a lease for the batch")
}

// hotRound makes a key hot at n: 8 calls at once (a caller asks for a
// lease only for a key called several times within one round trip). It
// returns the uses they took; each must be allowed.
func hotRound(t *testing.T, n *ringlimit.Node, key string, lim limiter.Limit) int64 {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := int64(0)
	for range 8 {
		wg.Go(func() {
			v, err := n.ConsumeMany(context.Background(), []limiter.Entry{{Key: key, Limit: lim}})
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
	return made
}

// A batch of calls (Node.Calls, a client's Multi) of which a lease decides
// some: the leased ones are answered here, the rest go to their owners,
// and each answer lands in its own call's place.
func TestLeasedCallsInABatch(t *testing.T) {
	leases := true
	tc := startCluster(t, 3, func(c *ringlimit.Config) { c.Leases = &leases })
	const hot = "batch-hot"
	hotLim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 100_000, Window: time.Minute}
	one := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 1, Window: time.Minute}
	_, others := ownerAndOthers(t, tc, hot)
	n := others[0]
	ctx := context.Background()
	for attempt := 0; attempt < 200; attempt++ {
		// Hot enough for a lease: the owner grants one after a few calls.
		for range 50 {
			if _, err := n.ConsumeMany(ctx, []limiter.Entry{{Key: hot, Limit: hotLim}}); err != nil {
				t.Fatal(err)
			}
		}
		spent := fmt.Sprintf("batch-spent-%d", attempt)
		if v, err := n.ConsumeMany(ctx, []limiter.Entry{{Key: spent, Limit: one}}); err != nil || !v.Allowed {
			t.Fatalf("spend %s: %+v, %v", spent, v, err)
		}
		fresh := func(i int) limiter.Call {
			return limiter.Call{Entries: []limiter.Entry{{Key: fmt.Sprintf("batch-fresh-%d-%d", attempt, i), Limit: one}}}
		}
		calls := []limiter.Call{fresh(0), fresh(1), {Entries: []limiter.Entry{{Key: hot, Limit: hotLim}}},
			{Entries: []limiter.Entry{{Key: spent, Limit: one}}}, fresh(2)}
		want := []bool{true, true, true, false, true}
		before := leaseMetric(t, n, "ringlimit_lease_local_decisions_total")
		out := make([]limiter.CallResult, len(calls))
		n.Calls(ctx, calls, out)
		for i, r := range out {
			if r.Err != nil || r.Verdict.Allowed != want[i] {
				t.Fatalf("attempt %d: call %d (%s): %+v, %v; want allowed %v", attempt, i, calls[i].Entries[0].Key, r.Verdict, r.Err, want[i])
			}
		}
		if leaseMetric(t, n, "ringlimit_lease_local_decisions_total") > before {
			return // the hot call was decided from the lease, the rest by their owners
		}
	}
	t.Fatal("no batch's hot call was decided from a lease in 200 attempts")
}
