package ringlimit_test

import (
	"fmt"
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/ring"
)

// The majority rule's tests cut the nodes' gRPC traffic (every node's port
// behind a blackhole, frozen) while their gossip stays up: memberlist then
// believes every member alive, which is the view a cut-off node has of the
// members it has not probed yet. Each test was run against main's rule
// (memberlist's view only, cached per live ring) and failed there: the
// first as soon as the crashed member was dead (the node routed its keys
// to itself), the second waiting for the re-route that never came.

// majorityCluster starts n nodes whose gRPC ports are reached through
// blackholes, and waits until each routes by the n-member ring.
func majorityCluster(t *testing.T, n int) (*testCluster, []*blackhole) {
	t.Helper()
	tc, holes := behindBlackholes(t, n, nil)
	for _, nd := range tc.nodes {
		waitFor(t, nd.Name()+" to route by the whole ring", func() bool {
			rg := nd.Router().RoutingRing()
			return rg != nil && rg.Len() == n
		})
	}
	// Registered after the nodes' Close: runs before it, so they close
	// with their peers reachable.
	t.Cleanup(func() { freeze(holes, false) })
	return tc, holes
}

func freeze(holes []*blackhole, on bool) {
	for _, h := range holes {
		h.frozen.Store(on)
	}
}

// keysOf returns count keys that owner owns on rg.
func keysOf(t *testing.T, rg *ring.Ring, owner string, count int) []string {
	t.Helper()
	var keys []string
	for i := 0; len(keys) < count; i++ {
		k := fmt.Sprint("maj-", i)
		if o, err := rg.Owner(k); err != nil {
			t.Fatal(err)
		} else if o == owner {
			keys = append(keys, k)
		}
	}
	return keys
}

// stateOf is the state x's member table gives name ("" if none).
func stateOf(x *ringlimit.Node, name string) string {
	for _, m := range x.Members() {
		if m.Name == name {
			return m.State
		}
	}
	return ""
}

// liveSet names the members on x's live ring (alive or suspect).
func liveSet(x *ringlimit.Node) string {
	var names []string
	for _, m := range x.Members() {
		if m.State == "alive" || m.State == "suspect" {
			names = append(names, m.Name)
		}
	}
	return fmt.Sprint(names)
}

// claims returns the keys x names itself the owner of, by its Owner
// answer or by the ring its router routes by.
func claims(t *testing.T, x *ringlimit.Node, keys []string) []string {
	t.Helper()
	var out []string
	rg := x.Router().RoutingRing()
	for _, k := range keys {
		o := mustOwner(t, x, k)
		ro, err := rg.Owner(k)
		if err != nil {
			t.Fatal(err)
		}
		if o == x.Name() || ro == x.Name() {
			out = append(out, k)
		}
	}
	return out
}

// The stale view: node-0 cannot reach any member over gRPC while gossip
// still says they are all alive; then node-4 crashes and is declared dead.
// By memberlist's view node-0 sees 4 of 5 alive, a majority; it reaches
// only itself. It must not take over node-4's keys (name itself their
// owner, or route them to itself) while it cannot reach a majority, and
// must take them over once it reaches the others again (with no ring
// change: node-4 stays dead).
func TestMajorityCutOffNodeTakesNoKeys(t *testing.T) {
	tc, holes := majorityCluster(t, 5)
	x, d := tc.nodes[0], tc.nodes[4]
	keys := keysOf(t, x.Router().RoutingRing(), d.Name(), 20)
	freeze(holes, true)
	ringlimit.Crash(d)
	rounds := 0
	waitFor(t, "node-0 to see node-4 dead", func() bool {
		dead := stateOf(x, d.Name()) == "dead"
		if c := claims(t, x, keys); len(c) > 0 {
			t.Fatalf("node-0 reaches no member over gRPC yet claims %d of node-4's keys (%v), node-4 %s; its members: %v",
				len(c), c, stateOf(x, d.Name()), x.Members())
		}
		return dead
	})
	// Once node-4 is dead, main's rule took its keys at once (4 of 5
	// alive by memberlist); keep checking while node-0's view settles.
	waitFor(t, "50 rounds with node-4 dead", func() bool {
		if c := claims(t, x, keys); len(c) > 0 {
			t.Fatalf("round %d with node-4 dead: node-0 reaches no member over gRPC yet claims %d of node-4's keys (%v); its members: %v",
				rounds, len(c), c, x.Members())
		}
		rounds++
		return rounds >= 50
	})
	// Healed: node-0 reaches a majority again, nothing changed in its
	// ring (node-4 is dead throughout), and it takes the keys over.
	before := liveSet(x)
	freeze(holes, false)
	waitFor(t, "node-0 to take over node-4's keys once it reaches the others", func() bool {
		rg := x.Router().RoutingRing()
		if rg.Has(d.Name()) {
			return false
		}
		for _, k := range keys {
			if o := mustOwner(t, x, k); o == d.Name() {
				return false
			}
		}
		return true
	})
	if after := liveSet(x); after != before {
		t.Errorf("node-0's live members changed meanwhile (%s -> %s): the take-over is not shown to come without a ring change", before, after)
	}
}

// The verdict follows its evidence without a ring change: node-4 crashed
// and node-0 took over its keys (it reached the others); then node-0's
// gRPC traffic is cut both ways (every port frozen, gossip up: its live
// ring does not change). It must re-route by every member it knows, giving
// node-4's keys back to the fallback, in its Owner answers and in its
// router; and take them again when it reaches the others.
func TestMajorityVerdictReevaluatedWithoutRingChange(t *testing.T) {
	tc, holes := majorityCluster(t, 5)
	x, d := tc.nodes[0], tc.nodes[4]
	keys := keysOf(t, x.Router().RoutingRing(), d.Name(), 20)
	ringlimit.Crash(d)
	tookOver := func() bool {
		if x.Router().RoutingRing().Has(d.Name()) {
			return false
		}
		for _, k := range keys {
			if mustOwner(t, x, k) == d.Name() {
				return false
			}
		}
		return true
	}
	waitFor(t, "node-0 to take over node-4's keys", tookOver)
	before := liveSet(x)
	freeze(holes, true)
	waitFor(t, "node-0 to route node-4's keys by the whole ring again", func() bool {
		if !x.Router().RoutingRing().Has(d.Name()) {
			return false
		}
		for _, k := range keys {
			if mustOwner(t, x, k) != d.Name() {
				return false
			}
		}
		return true
	})
	if after := liveSet(x); after != before {
		t.Errorf("node-0's live members changed meanwhile (%s -> %s): the re-route is not shown to come without a ring change", before, after)
	}
	freeze(holes, false)
	waitFor(t, "node-0 to take node-4's keys again once it reaches the others", tookOver)
}
