package leasehold

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// BenchmarkTakeOrAskCold is the lease gate every call of a fleet client or
// an embedded node passes: uniform calls over 10,000 keys, none of them
// hot, from parallel callers (the load of cmd/node/bench.sh). The clock
// moves 10 µs a call, so each key is called every 100 ms, as at 100,000
// calls/s; ns/op is what a call that finds no lease pays for the look.
func BenchmarkTakeOrAskCold(b *testing.B) {
	var ticks atomic.Int64
	start := time.Now()
	tb := New(Config{Now: func() time.Time { return start.Add(time.Duration(ticks.Add(1)) * 10 * time.Microsecond) }})
	limit := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 100, Window: time.Second}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		e := limiter.Entry{Limit: limit}
		for pb.Next() {
			e.Key = keys[next.Add(1)%int64(len(keys))]
			if _, ok, _, _, asking := tb.TakeOrAsk(e, false); ok || asking {
				b.Fatal("a cold key found a lease or asked for one")
			}
		}
	})
}
