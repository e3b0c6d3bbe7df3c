package client

import (
	"context"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
)

var _ limiter.Resetter = (*Client)(nil)

// Reset forgets counters in the fleet (see limiter.Resetter and the
// node's Reset): with limits, each key's counter of each; without, every
// counter of each key. The first node that answers sends each key's reset
// to the node counting it; the client drops its own cached refusals of
// the keys at once (the nodes push the keys to the other clients).
// Without a deadline on ctx it waits Config.Timeout. Bad input is an
// *limiter.InputError naming the field, as the node reports it; a node
// whose store cannot reset gives an error matching limiter.ErrUnsupported.
func (c *Client) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	if len(keys) == 0 {
		return &limiter.InputError{Field: "keys", Reason: "must not be empty"}
	}
	req := rpc.ResetToPB(keys, limits, 0)
	err := c.each(ctx, func(ctx context.Context, n *clientNode) error {
		_, err := n.api.Reset(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	c.refusals.Drop(keys)
	return nil
}
