package rls_test

import (
	"context"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

func Example() {
	store := limiter.NewMemory(limiter.MemoryConfig{})
	defer store.Close()
	domain, err := rls.Parse("messaging.yaml", []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 2
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	svc, err := rls.New(store, rls.Config{Domains: []rls.Domain{domain}})
	if err != nil {
		fmt.Println(err)
		return
	}
	// svc.Register(grpcServer) serves it; here it is called directly.
	req := &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining())
	}
	// Output:
	// OK 2 DAY 1
	// OK 2 DAY 0
	// OVER_LIMIT 2 DAY 0
}

func ExampleParse_error() {
	_, err := rls.Parse("rl.yaml", []byte("domain: rl\ndescriptors:\n  - key: foo\n    rate_limit:\n      unit: fortnight\n"))
	fmt.Println(err)
	// Output:
	// rls: rl.yaml:5: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)
}
