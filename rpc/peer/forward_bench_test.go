package peer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
)

// BenchmarkForward is the forward path alone: 64 callers on node a
// consume keys node b owns, over real gRPC on 127.0.0.1 (a's router, its
// peer client and stream, b's server and router). cpu-ns/op is the
// process's CPU per decision, both nodes together.
func BenchmarkForward(b *testing.B) {
	// The start's ring change is past its fetch window at once (as on a
	// node long in service): no first-use fetches.
	ns := startNodesConfig(b, func(c *owner.Config) { c.FetchWindow = time.Millisecond }, "a", "b")
	time.Sleep(20 * time.Millisecond)
	a := ns["a"]
	rg := a.router.RoutingRing()
	var keys []string
	for i := 0; len(keys) < 10000; i++ {
		k := fmt.Sprint("k-", i)
		if o, _ := rg.Owner(k); o == "b" {
			keys = append(keys, k)
		}
	}
	lim := limiter.Limit{Uses: 100, Window: time.Second} // the cluster benchmark's: all allowed
	var next atomic.Int64
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.SetParallelism(32) // 64 callers on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		entries := []limiter.Entry{{Limit: lim}}
		for pb.Next() {
			entries[0].Key = keys[next.Add(1)%int64(len(keys))]
			if _, err := a.router.ConsumeMany(ctx, entries); err != nil {
				b.Errorf("forwarded consume: %v", err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
