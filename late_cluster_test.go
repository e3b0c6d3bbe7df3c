package ringlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

// A node frozen while a call waits for it (its gRPC bytes held, as a
// process stopped by SIGSTOP whose kernel still takes them), then thawed,
// reads the call late and counts it: it cannot tell how long the bytes
// waited. The caller was refused at its deadline (by the Deny policy of
// the embedded node that forwarded it, or with an error by the fleet
// client); the owner's answer, which comes after, is given back, so the
// key loses no use for a call that did not run. (Before, the stream
// dropped an answer whose request's wait had ended, and the use stayed
// counted for the window.) The fleet client's call is made with
// limiter.WithRelease: without it the node sends no receipts, and there is
// nothing to give back with (README, Guarantees).
func TestThawedOwnerGivesLateCountBack(t *testing.T) {
	const timeout = 250 * time.Millisecond
	tc, holes := behindBlackholes(t, 3, func(c *ringlimit.Config) {
		c.Fallback, c.FallbackSet, c.Timeout = fallback.Deny, true, timeout
	})
	owner := tc.nodes[2]
	noLeases := false
	fleet, err := client.DialConfig(context.Background(), client.Config{Addrs: []string{owner.GRPCAddr()}, Timeout: timeout, Leases: &noLeases})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	for !fleet.Routing() {
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range []struct {
		name     string
		asker    limiter.Store
		ctx      context.Context
		released func() int64
	}{
		{"embedded node", tc.nodes[0], context.Background(), func() int64 { return tc.nodes[0].Peers().Stats().Released.Load() }},
		{"fleet client", fleet, limiter.WithRelease(context.Background()), func() int64 { return fleet.Stats().Released }},
	} {
		t.Run(c.name, func(t *testing.T) {
			lateCountGivenBack(t, c.ctx, owner, holes[2], c.asker, c.released, c.name)
		})
	}
}

// warmUp calls key through st until a call is allowed, so the streams to
// its owner are open (on a busy machine the first may take longer than a
// short Timeout, and its policy answer).
func warmUp(t *testing.T, ctx context.Context, st limiter.Store, key string) {
	t.Helper()
	waitFor(t, "a warm-up call of "+key+" allowed", func() bool {
		v, err := st.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: limiter.Limit{Uses: 1000, Window: time.Minute}}})
		return err == nil && v.Allowed
	})
}

// lateCountGivenBack calls a key of owner through asker with ctx while
// owner's gRPC is frozen (hole), thaws it, and checks that the use the
// owner then counts is given back (released counts the asker's
// give-backs).
func lateCountGivenBack(t *testing.T, ctx context.Context, owner *ringlimit.Node, hole *blackhole, asker limiter.Store, released func() int64, prefix string) {
	keyOf := func(prefix string) string {
		for i := 0; ; i++ {
			if o, _ := owner.Owner(fmt.Sprint(prefix, i)); o == owner.Name() {
				return fmt.Sprint(prefix, i)
			}
		}
	}
	limit := limiter.Limit{Uses: 4, Window: time.Minute}
	// Warm the asker's stream to the owner, then freeze the owner.
	warmUp(t, ctx, asker, keyOf(prefix+" warm-"))
	key := keyOf(prefix + " late-")
	entries := []limiter.Entry{{Key: key, Limit: limit}}
	fresh, err := owner.PeekMany(context.Background(), entries)
	if err != nil {
		t.Fatal(err)
	}
	before := released()

	hole.frozen.Store(true)
	v, err := asker.ConsumeMany(ctx, entries)
	if err == nil && v.Allowed {
		t.Fatalf("a call to a frozen owner was allowed: %+v", v)
	}
	hole.frozen.Store(false)

	// The held call reaches the owner now: it counts it and answers, and
	// the asker gives the use back.
	deadline := time.Now().Add(15 * time.Second)
	for released() == before {
		if time.Now().After(deadline) {
			pv, _ := owner.PeekMany(context.Background(), entries)
			t.Fatalf("the owner's late answer was never given back (the owner's peek: %d remaining, %d on a fresh key)", pv.Remaining, fresh.Remaining)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		pv, err := owner.PeekMany(context.Background(), entries)
		if err == nil && pv.Remaining == fresh.Remaining {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the give-back the owner's peek says %d remaining (%v), want %d as on a fresh key", pv.Remaining, err, fresh.Remaining)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
