package limiter_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/ringlimit/ringlimit/limiter"
)

// The benchmarks of the Memory store, with golang.org/x/time/rate as the
// floor: a single rate.Limiter is one mutex and a few float operations,
// with no key to find. BENCHMARKS.md at the repository root records the
// figures and the command.
//
// Limits are chosen so that every call passes (the longer path: decide
// and record). The sliding log keeps 100,000 uses per 10 ms window at most,
// its bound: at about 10M calls/s that is all of them, so the log is long
// and trimmed on every call.

var benchAlgorithms = []struct {
	name  string
	limit limiter.Limit
}{
	{"sliding-log", limiter.Limit{Algorithm: limiter.SlidingLog, Uses: limiter.DefaultMaxLogUses, Window: 10 * time.Millisecond}},
	{"sliding-window", limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 1 << 50, Window: time.Hour}},
	{"token-bucket", limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1 << 50, Window: time.Hour}},
}

func newBenchMemory(b *testing.B) *limiter.Memory {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	b.Cleanup(func() { m.Close() })
	return m
}

// BenchmarkConsumeHotKey is one key consumed over and over: the path of
// one call with nothing to wait for (ConsumeMany, a preallocated batch,
// a background context: no Release closure is built).
func BenchmarkConsumeHotKey(b *testing.B) {
	for _, a := range benchAlgorithms {
		b.Run(a.name, func(b *testing.B) {
			m := newBenchMemory(b)
			entries := []limiter.Entry{{Key: "user:1234/api", Limit: a.limit}}
			ctx := context.Background()
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				v, err := m.ConsumeMany(ctx, entries)
				if err != nil || !v.Allowed {
					b.Fatalf("%+v, %v", v, err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkRateAllow is the floor: x/time/rate's Limiter.Allow on one
// limiter whose every call passes.
func BenchmarkRateAllow(b *testing.B) {
	l := rate.NewLimiter(rate.Limit(1<<50), 1<<50)
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		if !l.Allow() {
			b.Fatal("refused")
		}
	}
	reportCPU(b, cpu)
}

// reportCPU reports the process's CPU time per op since start, beside
// ns/op (see processCPU). For a parallel benchmark it sums every core.
func reportCPU(b *testing.B, start time.Duration) {
	if used := processCPU() - start; used > 0 && b.N > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

const benchKeys = 1_000_000

var benchKeyNames = sync.OnceValue(func() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i) + "/api"
	}
	return keys
})

// BenchmarkConsumeDistinctKeys cycles through 1M keys: the cost of
// finding (and, the first time, adding) a counter in a large store.
func BenchmarkConsumeDistinctKeys(b *testing.B) {
	keys := benchKeyNames()
	for _, a := range benchAlgorithms {
		b.Run(a.name, func(b *testing.B) {
			m := newBenchMemory(b)
			entries := []limiter.Entry{{Limit: a.limit}}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				entries[0].Key = keys[i]
				if i++; i == len(keys) {
					i = 0
				}
				v, err := m.ConsumeMany(ctx, entries)
				if err != nil || !v.Allowed {
					b.Fatalf("%+v, %v", v, err)
				}
			}
		})
	}
}

// BenchmarkConsumeParallel runs ConsumeMany from GOMAXPROCS goroutines,
// each on its own 1024 keys (the shards spread them). Run it with
// -cpu 1,2: ns/op at -cpu 2 against -cpu 1 is the parallel speed-up.
func BenchmarkConsumeParallel(b *testing.B) {
	keys := benchKeyNames()
	for _, a := range benchAlgorithms {
		b.Run(a.name, func(b *testing.B) {
			m := newBenchMemory(b)
			var worker atomic.Int64
			b.ReportAllocs()
			cpu := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				first := int(worker.Add(1)-1) * 1024 % len(keys)
				entries := []limiter.Entry{{Limit: a.limit}}
				ctx := context.Background()
				i := 0
				for pb.Next() {
					entries[0].Key = keys[first+i]
					i = (i + 1) & 1023
					v, err := m.ConsumeMany(ctx, entries)
					if err != nil || !v.Allowed {
						b.Errorf("%+v, %v", v, err)
						return
					}
				}
			})
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkRateAllowParallel is the floor in parallel: one rate.Limiter
// per goroutine (a shared one would serialise on its mutex).
func BenchmarkRateAllowParallel(b *testing.B) {
	b.ReportAllocs()
	cpu := processCPU()
	defer reportCPU(b, cpu)
	b.RunParallel(func(pb *testing.PB) {
		l := rate.NewLimiter(rate.Limit(1<<50), 1<<50)
		for pb.Next() {
			if !l.Allow() {
				b.Error("refused")
				return
			}
		}
	})
}

// BenchmarkBytesPerKey fills a store with 1M keys, one use each, and
// reports the heap it holds per key (B/key), keys included, measured after
// a GC before and after.
func BenchmarkBytesPerKey(b *testing.B) {
	keys := benchKeyNames()
	for _, a := range benchAlgorithms {
		l := a.limit
		if l.Algorithm == limiter.SlidingLog {
			l = limiter.Limit{Uses: 5, Window: time.Hour} // the cooldown case: few uses
		}
		b.Run(a.name, func(b *testing.B) {
			var perKey float64
			for b.Loop() {
				perKey = bytesPerKey(b, keys, l)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

func bytesPerKey(b *testing.B, keys []string, l limiter.Limit) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	entries := []limiter.Entry{{Limit: l}}
	ctx := context.Background()
	for _, k := range keys {
		entries[0].Key = k
		if _, err := m.ConsumeMany(ctx, entries); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if m.Len() != len(keys) {
		b.Fatal(fmt.Sprintf("Len() = %d, want %d", m.Len(), len(keys)))
	}
	runtime.KeepAlive(m)
	m.Close()
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(len(keys))
}
