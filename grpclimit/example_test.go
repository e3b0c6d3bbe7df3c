package grpclimit_test

import (
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/limiter"
)

func Example() {
	store := limiter.NewMemory(limiter.MemoryConfig{})
	defer store.Close()

	lim, err := grpclimit.New(store, grpclimit.Options{
		Limit:       limiter.Limit{Uses: 100, Window: time.Minute},
		MetadataKey: "x-api-key", // one quota per API key
		Methods: []grpclimit.Rule{
			grpclimit.Method("/shop.Orders/Create", limiter.Limit{Uses: 10, Window: time.Minute}),
			grpclimit.Exempt("/grpc.health.v1.Health/*"),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.Unary()), grpc.StreamInterceptor(lim.Stream()))
	defer srv.Stop()

	_, err = grpclimit.New(store, grpclimit.Options{Limit: limiter.Limit{Uses: 0, Window: time.Minute}})
	fmt.Println(err)
	// Output:
	// limiter: Limit.uses: must be at least 1, got 0
}

// At most 4 exports of an API key in flight; a stream holds its slot
// until it ends.
func ExampleConcurrency() {
	store := limiter.NewMemory(limiter.MemoryConfig{})
	defer store.Close()
	lim, err := grpclimit.New(store, grpclimit.Options{
		Limit:       limiter.Limit{Uses: 100, Window: time.Minute},
		MetadataKey: "x-api-key",
		Methods:     []grpclimit.Rule{grpclimit.Concurrency("/shop.Exports/*", 4, 10*time.Minute)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.Unary()), grpc.StreamInterceptor(lim.Stream()))
	defer srv.Stop()
	fmt.Println(limiter.ConcurrencyLimit(4, 10*time.Minute))
	// Output: concurrency:4/10m
}
