package ringlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// acquireOn takes one slot of key through n and fails the test unless the
// verdict is want; it returns the slot's release.
func acquireOn(t *testing.T, n *ringlimit.Node, key string, l limiter.Limit, want bool) func(context.Context) error {
	t.Helper()
	release, v, err := limiter.AcquireLimit(context.Background(), n, key, l)
	if err != nil || v.Allowed != want || v.Failure != nil {
		t.Fatalf("acquire %s through %s: %+v, %v; want allowed=%v", key, n.Name(), v, err, want)
	}
	return release
}

// peekSlots asks through n whether one more slot of key is free, waiting
// out verdicts of the failure policy (a node that still routes to a
// member that just left).
func peekSlots(t *testing.T, n *ringlimit.Node, key string, l limiter.Limit) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		v, err := n.PeekMany(context.Background(), []limiter.Entry{{Key: key, Limit: l}})
		if err != nil {
			t.Fatalf("peek %s: %v", key, err)
		}
		if v.Failure == nil {
			return v.Allowed
		}
		if time.Now().After(deadline) {
			t.Fatalf("peek %s: still a fallback verdict after 5 s: %v", key, v.Failure)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// At most N slots of a key are held across the cluster, whichever nodes
// the callers go through; a release through one node frees the slot for
// a caller of another, once.
func TestConcurrencyAcrossNodes(t *testing.T) {
	tc := startCluster(t, 3, nil)
	waitRingsAgree(t, tc)
	l := limiter.ConcurrencyLimit(3, time.Hour)
	key := keyOwnedBy(t, tc.nodes[0], tc.nodes[2].Name(), "tenant")
	var releases []func(context.Context) error
	for _, n := range tc.nodes {
		releases = append(releases, acquireOn(t, n, key, l, true))
	}
	for _, n := range tc.nodes {
		acquireOn(t, n, key, l, false)
	}
	if err := releases[1](context.Background()); err != nil {
		t.Fatal(err)
	}
	acquireOn(t, tc.nodes[0], key, l, true)
	if err := releases[1](context.Background()); err != nil { // twice: frees nothing
		t.Fatal(err)
	}
	acquireOn(t, tc.nodes[2], key, l, false)
}

// A node that joins takes over keys with their held slots (the hand-off
// carries them), and a slot taken before the move is freed by its release
// after it, at the key's new owner: a slot never stays held until its TTL
// because its key moved.
func TestConcurrencyHandOffKeepsSlots(t *testing.T) {
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.Replicas = -1 })
	waitRingsAgree(t, tc)
	l := limiter.ConcurrencyLimit(2, time.Hour)
	type held struct {
		key      string
		releases []func(context.Context) error
	}
	var keys []held
	for i := range 60 {
		k := fmt.Sprintf("handoff-slots-%d", i)
		h := held{key: k}
		for range 2 {
			h.releases = append(h.releases, acquireOn(t, tc.nodes[i%2], k, l, true))
		}
		keys = append(keys, h)
	}
	joiner := tc.add("node-2", func(c *ringlimit.Config) { c.Replicas = -1 })
	tc.waitMembers(3)
	waitRingsAgree(t, tc)
	waitQuiet(t, tc)
	moved := 0
	for _, h := range keys {
		if owner(t, joiner, h.key) != joiner.Name() {
			continue
		}
		moved++
		if peekSlots(t, tc.nodes[0], h.key, l) {
			t.Fatalf("%s moved to %s and lost its held slots", h.key, joiner.Name())
		}
		if err := h.releases[0](context.Background()); err != nil {
			t.Fatalf("release of %s after its move: %v", h.key, err)
		}
		if !peekSlots(t, tc.nodes[1], h.key, l) {
			t.Fatalf("%s: a release after the key moved to %s did not free its slot there", h.key, joiner.Name())
		}
		acquireOn(t, joiner, h.key, l, true)
		acquireOn(t, tc.nodes[0], h.key, l, false)
	}
	if moved == 0 {
		t.Fatal("no key moved to the node that joined")
	}
	t.Logf("%d of %d keys moved with their slots", moved, len(keys))
}

// An owner that crashes with one replica loses no held slot: its
// successor adopts them, and their releases free them there.
func TestConcurrencyCrashKeepsSlots(t *testing.T) {
	tc := startCluster(t, 3, func(c *ringlimit.Config) { c.Replicas = 1 })
	waitRingsAgree(t, tc)
	victim := tc.nodes[2]
	l := limiter.ConcurrencyLimit(2, time.Hour)
	var keys []string
	releases := map[string][]func(context.Context) error{}
	for i := 0; len(keys) < 20; i++ {
		k := fmt.Sprintf("crash-slots-%d", i)
		if owner(t, tc.nodes[0], k) != victim.Name() {
			continue
		}
		keys = append(keys, k)
		for range 2 {
			releases[k] = append(releases[k], acquireOn(t, tc.nodes[0], k, l, true))
		}
	}
	waitReplicated(t, tc, victim, len(keys))
	ringlimit.Crash(victim)
	tc.forget(victim)
	tc.waitMembers(2)
	waitRingsAgree(t, tc)
	for _, k := range keys {
		if peekSlots(t, tc.nodes[1], k, l) {
			t.Fatalf("%s: its owner crashed and its held slots were lost", k)
		}
	}
	for _, k := range keys {
		// The recording owner is gone: the release must reach the
		// successor that adopted the slot, and then it succeeded.
		if err := releases[k][0](context.Background()); err != nil {
			t.Fatalf("%s: release after its owner crashed: %v; want nil (the adopted slot was freed)", k, err)
		}
		if !peekSlots(t, tc.nodes[0], k, l) {
			t.Fatalf("%s: a release after its owner crashed did not free the adopted slot", k)
		}
	}
}
