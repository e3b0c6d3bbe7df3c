package ringlimit

import (
	"context"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
)

var (
	_ limiter.Resetter = (*Node)(nil)
	_ limiter.Resetter = readyGate{}
)

// Reset forgets counters, so an operator can unlock a user (see
// limiter.Resetter): with limits, each key's counter of each (named by
// algorithm and window); without, every counter of each key. The node
// sends each key's reset to the node counting it, which forgets the
// counters and ships the deletion to its replicas; every member then
// drops its cached refusals of the keys, and so do the fleet clients
// streaming from them. A reset meets no failure policy: it happens, or
// returns an error (an owner that could not be reached: retry it, a reset
// is idempotent). A reset made before the node joined its cluster waits
// for it, at most Timeout.
func (n *Node) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	if n.isClosing() {
		return rpc.ErrShuttingDown
	}
	return limiter.Reset(ctx, n.front, keys, limits...)
}

// Reset reaches the router once the node has joined its cluster.
func (g readyGate) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	if err := g.n.waitReady(ctx); err != nil {
		return err
	}
	return g.n.router.Reset(ctx, keys, limits...)
}
