package ringlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/limiter"
)

// A lease goes out only once its reservation is on every replica: an
// owner that crashed after granting one its replica never got would leave
// a new owner that does not count the lease's k uses, which the holder
// still spends. With the replica's gRPC frozen, a sliding log's and a
// token bucket's grants are taken back and answered as none, the owner's
// counters are whole again, and the metric counts them; thawed, the next
// grants go out.
func TestLeaseWithheldUntilReplicated(t *testing.T) {
	const timeout = 250 * time.Millisecond
	tc, nodeHoles := behindBlackholes(t, 3, func(c *ringlimit.Config) { c.Timeout = timeout })
	holes := map[string]*blackhole{}
	for i, n := range tc.nodes {
		holes[n.Name()] = nodeHoles[i]
	}
	ctx := context.Background()
	logLim := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 100, Window: time.Minute}
	bucketLim := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Minute}
	// Two keys of one owner that share their replica.
	own, _ := ownerAndOthers(t, tc, "withheld-0")
	succ, err := own.Router().RoutingRing().Successors("withheld-0", 2)
	if err != nil || len(succ) != 2 {
		t.Fatalf("successors: %v, %v", succ, err)
	}
	logKey, bucketKey := "withheld-0", ""
	for i := 1; bucketKey == ""; i++ {
		k := fmt.Sprint("withheld-", i)
		if s, err := own.Router().RoutingRing().Successors(k, 2); err == nil && s[0] == succ[0] && s[1] == succ[1] {
			bucketKey = k
		}
	}
	// Leases of a second: a bucket's hold outlives the replica's 250 ms
	// time-out, so taking the grant back finds it (a hold that expired
	// first keeps its tokens taken: conservative).
	asks := func() []leasehold.Ask {
		return []leasehold.Ask{
			{Key: logKey, Limit: logLim, K: 10, Length: time.Second},
			{Key: bucketKey, Limit: bucketLim, K: 10, Length: time.Second},
		}
	}
	left := func(key string, l limiter.Limit) int64 {
		v, err := own.PeekMany(ctx, []limiter.Entry{{Key: key, Limit: l}})
		if err != nil {
			t.Fatal(err)
		}
		return v.Remaining
	}
	fullLog, fullBucket := left(logKey, logLim), left(bucketKey, bucketLim)
	// Warm the replication stream to the replica.
	warmUp(t, ctx, own, "warm-"+logKey)

	holes[succ[1]].frozen.Store(true)
	gs := own.Router().Lease(ctx, "ghost-holder", nil, nil, asks())
	holes[succ[1]].frozen.Store(false)
	for _, g := range gs {
		if g.K != 0 {
			t.Fatalf("a grant went out while its replica %s was frozen: %+v", succ[1], gs)
		}
	}
	if got := own.Router().LeaseStats().Unreplicated.Load(); got != 2 {
		t.Fatalf("%d grants counted as unreplicated, want 2", got)
	}
	if l, b := left(logKey, logLim), left(bucketKey, bucketLim); l != fullLog || b != fullBucket {
		t.Fatalf("after the grants were taken back the owner holds %d and %d, want %d and %d (whole)", l, b, fullLog, fullBucket)
	}

	// Thawed, the replica answers again and the grants go out (a
	// replication stream broken by the freeze may take a moment).
	for deadline := time.Now().Add(10 * time.Second); ; {
		gs := own.Router().Lease(ctx, "ghost-holder", nil, nil, asks())
		if gs[0].K > 0 && gs[1].K > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the thaw, no grant in 10 s: %+v", gs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
