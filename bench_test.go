package ringlimit_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
)

// BenchmarkRefusedHotKey shows that a hot refused key costs no round trip:
// through a node that does not own the key, refusals come from its refusal
// cache, about as fast as from the owner's own engine.
func BenchmarkRefusedHotKey(b *testing.B) {
	tc := startClusterB(b, 3)
	owner := tc.nodes[0]
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprint("hot-", i)
		if o, _ := owner.Owner(key); o == owner.Name() {
			break
		}
	}
	limit := limiter.Limit{Uses: 1, Window: time.Hour}
	ctx := context.Background()
	if v, err := owner.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: limit}}); err != nil || !v.Allowed {
		b.Fatalf("first use: %+v %v", v, err)
	}
	for _, c := range []struct {
		name string
		node int
	}{{"owner", 0}, {"non-owner", 1}} {
		b.Run(c.name, func(b *testing.B) {
			n := tc.nodes[c.node]
			rpcs := n.Peers().Stats().RPCs.Load()
			b.RunParallel(func(pb *testing.PB) {
				entries := []limiter.Entry{{Key: key, Limit: limit}}
				for pb.Next() {
					v, err := n.ConsumeMany(ctx, entries)
					if err != nil || v.Allowed {
						b.Errorf("refused hot key: %+v %v", v, err)
						return
					}
				}
			})
			b.ReportMetric(float64(n.Peers().Stats().RPCs.Load()-rpcs)/float64(b.N), "rpcs/op")
		})
	}
}

// BenchmarkFleetClient drives an in-process 3-node cluster through a
// Client the way `ringlimit bench` drives a fleet (64 callers, 10,000 keys,
// 100/1s), so that one CPU profile holds the client and the nodes. It
// measures the steady state: the cluster first waits out the first-use
// fetch window that follows its formation (10 s).
func BenchmarkFleetClient(b *testing.B) {
	tc := startClusterB(b, 3)
	var addrs []string
	for _, n := range tc.nodes {
		addrs = append(addrs, n.GRPCAddr())
	}
	owners, err := ringlimit.Dial(context.Background(), addrs...)
	if err != nil {
		b.Fatal(err)
	}
	defer owners.Close()
	any, err := ringlimit.DialConfig(context.Background(), ringlimit.ClientConfig{Addrs: addrs, RoundRobin: true})
	if err != nil {
		b.Fatal(err)
	}
	defer any.Close()
	for !owners.Routing() {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(10*time.Second + 500*time.Millisecond)
	limit := limiter.Limit{Uses: 100, Window: time.Second}
	var next atomic.Int64
	// c64: calls go to their keys' owners; c64-any: round-robin, so two
	// calls in three are forwarded by the node they reach.
	for _, r := range []struct {
		name string
		c    *ringlimit.Client
	}{{"c64", owners}, {"c64-any", any}} {
		b.Run(r.name, func(b *testing.B) {
			c := r.c
			before := c.Stats()
			fwd0, _ := tc.forwards()
			b.SetParallelism(32) // 64 callers on 2 cores
			b.RunParallel(func(pb *testing.PB) { consumeLoop(b, pb, c, limit, &next) })
			s := c.Stats()
			b.ReportMetric(float64(s.Calls-before.Calls)/float64(max(s.RPCs-before.RPCs, 1)), "calls/batch")
			fwd, _ := tc.forwards()
			b.ReportMetric(float64(fwd-fwd0)/float64(b.N), "forwards/op")
		})
	}
}

// BenchmarkEmbedded drives an in-process 3-node cluster the way embedded
// nodes are used: each caller calls the node of its own service instance
// (caller i calls node i mod 3), which decides the calls it owns and
// forwards the others to their owners (64 callers, 10,000 keys, 100/1s,
// after the first-use fetch window). It reports the mean forward batch.
// fleet-client is the same load from a fleet client in the same process,
// each call sent straight to its owner: the process's CPU per decision
// (cpu-ns/op, user+system) of the two is issue 20's target 4.
func BenchmarkEmbedded(b *testing.B) {
	tc := startClusterB(b, 3)
	var addrs []string
	for _, n := range tc.nodes {
		addrs = append(addrs, n.GRPCAddr())
	}
	fleet, err := ringlimit.Dial(context.Background(), addrs...)
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Close()
	for !fleet.Routing() {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(10*time.Second + 500*time.Millisecond)
	limit := limiter.Limit{Uses: 100, Window: time.Second}
	var next, caller atomic.Int64
	b.Run("embedded", func(b *testing.B) {
		rpcs0, calls0 := tc.forwards()
		cpu0 := processCPU()
		b.SetParallelism(32) // 64 callers on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			consumeLoop(b, pb, tc.nodes[caller.Add(1)%int64(len(tc.nodes))], limit, &next)
		})
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		rpcs, calls := tc.forwards()
		b.ReportMetric(float64(calls-calls0)/float64(max(rpcs-rpcs0, 1)), "calls/forward")
	})
	b.Run("fleet-client", func(b *testing.B) {
		cpu0 := processCPU()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) { consumeLoop(b, pb, fleet, limit, &next) })
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	// A client that does not know the ring, as any gRPC, JSON or Envoy
	// caller: each node it calls forwards two calls in three.
	anyClient, err := client.DialConfig(context.Background(), client.Config{Addrs: addrs, RoundRobin: true})
	if err != nil {
		b.Fatal(err)
	}
	defer anyClient.Close()
	b.Run("fleet-client-route-any", func(b *testing.B) {
		rpcs0, calls0 := tc.forwards()
		cpu0 := processCPU()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) { consumeLoop(b, pb, anyClient, limit, &next) })
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		rpcs, calls := tc.forwards()
		b.ReportMetric(float64(calls-calls0)/float64(max(rpcs-rpcs0, 1)), "calls/forward")
	})
}

// processCPU is the process's user+system CPU time, all threads.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// forwards sums the cluster's forward RPCs and the calls they carried.
func (tc *testCluster) forwards() (rpcs, calls int64) {
	for _, n := range tc.nodes {
		rpcs += n.Peers().Stats().RPCs.Load()
		calls += n.Peers().Stats().Calls.Load()
	}
	return rpcs, calls
}

// consumeLoop is one parallel caller of a benchmark: a use of the next of
// 10,000 keys at a time, until pb says stop.
func consumeLoop(b *testing.B, pb *testing.PB, st limiter.Store, limit limiter.Limit, next *atomic.Int64) {
	ctx := context.Background()
	entries := []limiter.Entry{{Limit: limit}}
	for pb.Next() {
		entries[0].Key = "k" + strconv.FormatInt(next.Add(1)%10000, 10)
		if _, err := st.ConsumeMany(ctx, entries); err != nil {
			b.Error(err)
			return
		}
	}
}
