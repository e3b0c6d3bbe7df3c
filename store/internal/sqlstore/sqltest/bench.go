package sqltest

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Bench measures ConsumeMany on s at concurrency 1 and 32 for every
// algorithm, over 1,000 keys under a limit of 1,000 per second (so calls
// are allowed and each recorded, the write path). It reports
// decisions/s.
func Bench(b *testing.B, s limiter.Store) {
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		l := limiter.Limit{Algorithm: alg, Uses: 1000, Window: time.Second}
		prefix := fmt.Sprintf("bench-%d-%v/", time.Now().UnixNano(), alg)
		for _, conc := range []int{1, 32} {
			b.Run(fmt.Sprintf("%v/c%d", alg, conc), func(b *testing.B) {
				var n atomic.Int64
				call := func() {
					k := prefix + fmt.Sprint(n.Add(1)%1000)
					if _, err := s.ConsumeMany(context.Background(), []limiter.Entry{{Key: k, Limit: l}}); err != nil {
						b.Error(err)
					}
				}
				start := time.Now()
				if conc == 1 {
					for b.Loop() {
						call()
					}
				} else {
					b.SetParallelism((conc + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							call()
						}
					})
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
			})
		}
	}
}
