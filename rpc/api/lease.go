package api

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Leaser is a Node that grants leases (issue #21): it takes a holder's
// returns and releases and answers its asks, one grant per ask in order.
type Leaser interface {
	Lease(ctx context.Context, holder string, rets []leasehold.Return, rels []leasehold.Release, asks []leasehold.Ask) []leasehold.Grant
}

// Lease serves the Lease RPC; a node without leases answers Unimplemented.
func (s *Server) Lease(ctx context.Context, req *pb.LeaseRequest) (*pb.LeaseResponse, error) {
	ln, ok := s.cfg.Node.(Leaser)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "ringlimit: this node grants no leases")
	}
	t := rpc.LeaseTrafficFromPB(req)
	return rpc.LeaseGrantsToPB(ln.Lease(ctx, t.Holder, t.Returns, t.Releases, t.Asks)), nil
}
