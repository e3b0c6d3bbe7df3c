package ringlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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
			rpcs := n.Router().ForwardStats().RPCs.Load()
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
			b.ReportMetric(float64(n.Router().ForwardStats().RPCs.Load()-rpcs)/float64(b.N), "rpcs/op")
		})
	}
}
