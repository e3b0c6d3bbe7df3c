package peer

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Leases between nodes (issue #21): an embedded node holds leases of the
// keys its peers own (Lease), and an owner asks a holder node for leases
// back before it refuses their keys (Recall).

// Lease sends node, the owner, a holder's lease traffic and returns its
// grants. A node that grants none answers leasehold.ErrNoLeases.
func (c *Client) Lease(ctx context.Context, node string, t leasehold.Traffic) ([]leasehold.Grant, error) {
	p, err := c.peer(node)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Lease(ctx, rpc.LeaseTrafficToPB(t))
	if status.Code(err) == codes.Unimplemented {
		return nil, leasehold.ErrNoLeases
	}
	if err != nil {
		return nil, rpc.FromStatus(err)
	}
	return rpc.LeaseGrantsFromPB(resp), nil
}

// Recall asks node, a holder, for the leases ids back and returns the
// returns of those it still held.
func (c *Client) Recall(ctx context.Context, node string, ids []uint64) ([]leasehold.Return, error) {
	p, err := c.peer(node)
	if err != nil {
		return nil, err
	}
	ans, err := p.client.Recall(ctx, &pb.LeaseRecall{Ids: ids})
	if err != nil {
		return nil, rpc.FromStatus(err)
	}
	return rpc.LeaseReturnsFromPB(ans.GetReturns()), nil
}

// Recaller is a node's holder side, which answers its peers' recalls.
type Recaller interface {
	Recall(ids []uint64) []leasehold.Return
}

// SetRecaller sets the holder that answers recalls (nil: none; a recall
// then gets nothing back).
func (s *Server) SetRecaller(h Recaller) {
	if h == nil {
		s.recaller.Store(nil)
		return
	}
	s.recaller.Store(&h)
}

// Lease serves a holder node's lease traffic (owner.Router.Lease).
func (s *Server) Lease(ctx context.Context, req *pb.LeaseRequest) (*pb.LeaseResponse, error) {
	t := rpc.LeaseTrafficFromPB(req)
	return rpc.LeaseGrantsToPB(s.r.Lease(ctx, t.Holder, t.Returns, t.Releases, t.Asks)), nil
}

// Recall gives an owner back the leases it asks for that this node holds.
func (s *Server) Recall(_ context.Context, req *pb.LeaseRecall) (*pb.LeaseRecallAnswer, error) {
	h := s.recaller.Load()
	if h == nil {
		return &pb.LeaseRecallAnswer{Seq: req.GetSeq()}, nil
	}
	return &pb.LeaseRecallAnswer{Seq: req.GetSeq(), Returns: rpc.LeaseReturnsToPB((*h).Recall(req.GetIds()))}, nil
}
