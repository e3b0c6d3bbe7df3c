package api

import (
	"context"
	"time"

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
	rets := make([]leasehold.Return, len(req.GetReturns()))
	for i, r := range req.GetReturns() {
		rets[i] = LeaseReturnFromPB(r)
	}
	rels := make([]leasehold.Release, len(req.GetReleases()))
	for i, r := range req.GetReleases() {
		rels[i] = leasehold.Release{Key: string(r.GetKey()), Limit: rpc.LimitFromPB(r.GetLimit()), ID: r.GetId(), Cost: r.GetCost()}
	}
	asks := make([]leasehold.Ask, 0, len(req.GetAsks()))
	for _, a := range req.GetAsks() {
		// The node checks each ask against its own bounds (an ask out of
		// them gets no lease).
		asks = append(asks, leasehold.Ask{Key: string(a.GetKey()), Limit: rpc.LimitFromPB(a.GetLimit()), K: a.GetK(), Length: time.Duration(a.GetLengthUs()) * time.Microsecond})
	}
	grants := ln.Lease(ctx, req.GetHolder(), rets, rels, asks)
	resp := &pb.LeaseResponse{Grants: make([]*pb.LeaseGrant, len(grants))}
	for i, g := range grants {
		resp.Grants[i] = &pb.LeaseGrant{Id: g.ID, K: g.K, LengthUs: g.Length.Microseconds(), Owner: g.Owner}
	}
	return resp, nil
}

// LeaseReturnToPB and LeaseReturnFromPB carry a return over the wire.
func LeaseReturnToPB(r leasehold.Return) *pb.LeaseReturn {
	out := &pb.LeaseReturn{Id: r.ID, Key: []byte(r.Key), Limit: rpc.LimitToPB(r.Limit), K: r.K, Uses: make([]*pb.LeaseUse, len(r.Uses))}
	for i, u := range r.Uses {
		out.Uses[i] = &pb.LeaseUse{Id: u.ID, Cost: u.Cost, AgeUs: u.AgeUs}
	}
	return out
}

// LeaseReturnFromPB is LeaseReturnToPB's inverse. Ages below 0 read as 0
// (a use is never younger than the return).
func LeaseReturnFromPB(r *pb.LeaseReturn) leasehold.Return {
	out := leasehold.Return{ID: r.GetId(), Key: string(r.GetKey()), Limit: rpc.LimitFromPB(r.GetLimit()), K: r.GetK(), Uses: make([]leasehold.Use, len(r.GetUses()))}
	for i, u := range r.GetUses() {
		out.Uses[i] = leasehold.Use{ID: u.GetId(), Cost: max(u.GetCost(), 1), AgeUs: max(u.GetAgeUs(), 0)}
		out.Used += out.Uses[i].Cost
	}
	return out
}
