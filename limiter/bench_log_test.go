package limiter_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// BenchmarkSlidingLogBytesPerUse reports the heap a sliding log holds per
// recorded use (B/use): 10,000 keys with 100 uses each against the same
// keys with one use each, so the key and counter overhead cancels out.
func BenchmarkSlidingLogBytesPerUse(b *testing.B) {
	const keys, uses = 10_000, 100
	l := limiter.Limit{Uses: uses, Window: time.Hour}
	heap := func(n int) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
		entries := []limiter.Entry{{Limit: l}}
		for u := 0; u < n; u++ {
			for k := range keys {
				entries[0].Key = "user:" + strconv.Itoa(k)
				if _, err := m.ConsumeMany(context.Background(), entries); err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(m)
		m.Close()
		return after.HeapAlloc - before.HeapAlloc
	}
	var perUse float64
	for b.Loop() {
		one, full := heap(1), heap(uses)
		perUse = float64(full-one) / float64(keys*(uses-1))
	}
	b.ReportMetric(perUse, "B/use")
}
