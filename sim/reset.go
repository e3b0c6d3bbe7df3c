package sim

import (
	"context"
	"fmt"
	"slices"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
)

// resetServer is a core that serves resets (owner.Router does).
type resetServer interface {
	ServeReset(ctx context.Context, req owner.ResetRequest) error
}

// Reset asks node to apply, or pass on, a reset. A core that has no
// resets answers an *limiter.UnsupportedError. A reset is idempotent, so
// the network may deliver it twice.
func (p *Peers) Reset(ctx context.Context, node string, req owner.ResetRequest) error {
	req.Keys, req.Limits = slices.Clone(req.Keys), slices.Clone(req.Limits)
	_, err := p.n.call(ctx, p.rt, p.self, node, "reset", true, func(ctx context.Context, srv Server) (any, error) {
		rs, ok := srv.(resetServer)
		if !ok {
			return nil, &limiter.UnsupportedError{Store: fmt.Sprintf("%T", srv), Op: "reset"}
		}
		return nil, rs.ServeReset(ctx, owner.ResetRequest{Keys: slices.Clone(req.Keys), Limits: slices.Clone(req.Limits), Hops: req.Hops})
	}, nil)
	return err
}
