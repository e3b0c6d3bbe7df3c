package ringlimit_test

import (
	"context"

	"github.com/ringlimit/ringlimit/limiter"
)

// Reset through a random live node, as the other calls of the cluster's
// conformance run go.
func (a anyNode) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	return a.pick().Reset(ctx, keys, limits...)
}
