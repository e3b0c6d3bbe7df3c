package peer

import (
	"context"

	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Reset asks node to apply, or pass on, a reset (owner.Router.ServeReset).
// It goes in a request of its own, never batched.
func (c *Client) Reset(ctx context.Context, node string, req owner.ResetRequest) error {
	p, err := c.peer(node)
	if err != nil {
		return err
	}
	_, err = p.client.Reset(ctx, rpc.ResetToPB(req.Keys, req.Limits, req.Hops))
	return rpc.FromStatus(err)
}

// Reset applies, or passes on, a peer's reset.
func (s *Server) Reset(ctx context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	keys, limits := rpc.ResetFromPB(req)
	if err := s.r.ServeReset(ctx, owner.ResetRequest{Keys: keys, Limits: limits, Hops: req.GetHops()}); err != nil {
		return nil, rpc.ToStatus(err)
	}
	return &pb.ResetResponse{}, nil
}
