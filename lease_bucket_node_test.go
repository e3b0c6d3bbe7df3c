package ringlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/chaos"
	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/limiter"
	ownerpkg "github.com/ringlimit/ringlimit/owner"
)

// Token buckets are leased (issue #21): two nodes that do not own a hot
// bucket key, each called for it from several goroutines, decide calls
// from leases, and no span [s, t] of the run admits more than the bucket's
// bound B + r*(t-s) (its capacity and what refilled meanwhile; the calls
// are timed by one process clock: an admission counts in a span when it
// was sent and answered inside it), with leases and without. The bucket
// is drained within the run, so its edge is exercised.
func TestLeasesEmbeddedBucketExact(t *testing.T) {
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 300, Window: 500 * time.Millisecond}
	leaseHotKey(t, "embedded-hot-bucket", lim, func(calls []chaos.Call) chaos.Overshoot {
		return chaos.CheckBucketOvershoot(calls, int(lim.Capacity()), int(lim.Uses), lim.Window, nil)
	})
}

// The first refusal of a bucket, as without leases: an owner about to
// refuse a bucket key whose tokens are out on a node's lease recalls it,
// the call that takes exactly the tokens left once the unused ones are
// back is allowed, and the next one refused. The bucket refills one token
// a day, so its arrival time stays ahead of the clock through the test
// and no refill blurs the count.
func TestLeasesBucketRecalledFromNode(t *testing.T) {
	tc := startCluster(t, 3, nil)
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1000, Window: 1000 * 24 * time.Hour}
	ctx := context.Background()
	for attempt := range 5 {
		key := fmt.Sprintf("recall-bucket-%d", attempt)
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
		v, err := own.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim, Cost: lim.Uses - made}})
		recalled := leaseMetric(t, own, "ringlimit_leases_recalled_total") > before
		if err == nil && !v.Allowed && !recalled {
			// The lease ended before the owner's call and its return came
			// after the hold's expiry (the lease's end plus ReturnSlack, a
			// busy machine): its unused tokens stay taken, conservatively.
			t.Logf("attempt %d: the lease ended and its return came late (a busy machine); again", attempt)
			continue
		}
		if err != nil || !v.Allowed {
			t.Fatalf("the rest of the bucket (%d) refused after %d calls, the lease recalled: %+v, %v", lim.Uses-made, made, v, err)
		}
		if v, err := own.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: lim}}); err != nil || v.Allowed {
			t.Fatalf("a call past the bucket: %+v, %v", v, err)
		}
		if leaseMetric(t, own, "ringlimit_leases_recalled_total") > before {
			if got := leaseMetric(t, h, "ringlimit_held_leases_recalled_total"); got < 1 {
				t.Fatalf("the owner recalled a lease, the holder counted %v recalls", got)
			}
			return
		}
		t.Logf("attempt %d: the lease ended before the owner's call (a busy machine); again", attempt)
	}
	t.Fatal("in 5 attempts the owner never recalled a bucket lease from the holder node")
}

// An owner that crashes with a bucket's tokens out on a lease leaves its
// replica the hold: the new owner keeps the floor, and the bucket stays at
// most B - k while the lease's holder (here one that never returns) may
// still spend its k tokens, well after it would have refilled to full.
// The grant reaches the replica before it answers. The hold is made to
// outlive the crash's detection by a long return slack at the owner.
func TestLeasesBucketOwnerCrashKeepsFloor(t *testing.T) {
	tc := startCluster(t, 4, nil)
	ctx := context.Background()
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 20, Window: time.Second}
	key := "bucket-crash"
	own, others := ownerAndOthers(t, tc, key)
	ringlimit.SetLeaseConfig(own, ownerpkg.LeaseConfig{ReturnSlack: time.Minute})
	gs := own.Router().Lease(ctx, "ghost-holder", nil, nil, []leasehold.Ask{{Key: key, Limit: lim, K: 10, Length: 200 * time.Millisecond}})
	if len(gs) != 1 || gs[0].K != 10 {
		t.Fatalf("grant: %+v; want 10 tokens", gs)
	}
	granted := time.Now()
	ringlimit.Crash(own)
	tc.forget(own)
	tc.waitMembers(3)
	peek := func() limiter.Verdict {
		for deadline := time.Now().Add(10 * time.Second); ; {
			v, err := others[0].PeekMany(ctx, []limiter.Entry{{Key: key, Limit: lim}})
			if err != nil {
				t.Fatalf("peek: %v", err)
			}
			if v.Failure == nil {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("peek: a fallback verdict 10 s after the crash: %v", v.Failure)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Past the second the bucket takes to refill, and for a while more,
	// it holds at most B - k = 10 tokens (Remaining counts the peek's one).
	for n := 0; n < 10 || time.Since(granted) < 1500*time.Millisecond; n++ {
		if v := peek(); !v.Allowed || v.Remaining+1 > 10 {
			t.Fatalf("%v after the grant, the new owner's bucket: %+v; want at most 10 tokens (20 less the 10 held)", time.Since(granted).Round(time.Millisecond), v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
