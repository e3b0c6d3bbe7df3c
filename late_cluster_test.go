package ringlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

// A node frozen while a forward waits for it (its gRPC bytes held, as a
// process stopped by SIGSTOP whose kernel still takes them), then thawed,
// reads the forward late and counts it: it cannot tell how long the bytes
// waited. The asker's caller was refused by the Deny policy at its
// deadline; the owner's answer, which comes after, is given back, so the
// key loses no use for a call that did not run. (Before, the stream
// dropped an answer whose request's wait had ended, and the use stayed
// counted for the window.)
func TestThawedOwnerGivesLateCountBack(t *testing.T) {
	const timeout = 250 * time.Millisecond
	tc := &testCluster{t: t}
	var holes []*blackhole
	for i := 0; i < 3; i++ {
		holes = append(holes, addBehindBlackhole(tc, fmt.Sprintf("node-%d", i), func(c *ringlimit.Config) {
			c.Fallback, c.FallbackSet, c.Timeout = fallback.Deny, true, timeout
		}))
	}
	tc.waitMembers(3)
	owner, asker := tc.nodes[2], tc.nodes[0]
	keyOf := func(prefix string) string {
		for i := 0; ; i++ {
			if o, _ := owner.Owner(fmt.Sprint(prefix, i)); o == owner.Name() {
				return fmt.Sprint(prefix, i)
			}
		}
	}
	limit := limiter.Limit{Uses: 4, Window: time.Minute}
	ctx := context.Background()
	// Warm the asker's stream to the owner, then freeze the owner.
	if v, err := asker.ConsumeMany(ctx, []limiter.Entry{{Key: keyOf("warm-"), Limit: limit}}); err != nil || !v.Allowed {
		t.Fatalf("warm-up call: %+v, %v", v, err)
	}
	key := keyOf("late-")
	entries := []limiter.Entry{{Key: key, Limit: limit}}
	fresh, err := owner.PeekMany(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	released := asker.Peers().Stats().Released.Load()

	holes[2].frozen.Store(true)
	v, err := asker.ConsumeMany(ctx, entries)
	if err == nil && v.Allowed {
		t.Fatalf("a call to a frozen owner under Deny was allowed: %+v", v)
	}
	holes[2].frozen.Store(false)

	// The held forward reaches the owner now: it counts the call and
	// answers, and the asker gives the use back.
	deadline := time.Now().Add(15 * time.Second)
	for asker.Peers().Stats().Released.Load() == released {
		if time.Now().After(deadline) {
			pv, _ := owner.PeekMany(ctx, entries)
			t.Fatalf("the owner's late answer was never given back (the owner's peek: %d remaining, %d on a fresh key)", pv.Remaining, fresh.Remaining)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		pv, err := owner.PeekMany(ctx, entries)
		if err == nil && pv.Remaining == fresh.Remaining {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the give-back the owner's peek says %d remaining (%v), want %d as on a fresh key", pv.Remaining, err, fresh.Remaining)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
