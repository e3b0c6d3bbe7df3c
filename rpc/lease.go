package rpc

import (
	"time"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Lease traffic on the wire (issue #21): the same messages carry a fleet
// client's traffic to a node (Limiter.Lease) and an embedded node's to a
// peer (Peer.Lease), and a holder's answers to a recall.

// LeaseTrafficToPB is a holder's traffic to one owner as a LeaseRequest.
func LeaseTrafficToPB(t leasehold.Traffic) *pb.LeaseRequest {
	req := &pb.LeaseRequest{Holder: t.Holder, Returns: LeaseReturnsToPB(t.Returns)}
	for _, r := range t.Releases {
		req.Releases = append(req.Releases, &pb.LeaseRelease{Key: []byte(r.Key), Limit: LimitToPB(r.Limit), Id: r.ID, Cost: r.Cost})
	}
	for _, a := range t.Asks {
		req.Asks = append(req.Asks, &pb.LeaseAsk{Key: []byte(a.Key), Limit: LimitToPB(a.Limit), K: a.K, LengthUs: a.Length.Microseconds()})
	}
	return req
}

// LeaseTrafficFromPB is LeaseTrafficToPB's inverse. The owner checks each
// ask against its own bounds (an ask out of them gets no lease).
func LeaseTrafficFromPB(req *pb.LeaseRequest) leasehold.Traffic {
	t := leasehold.Traffic{Holder: req.GetHolder(), Returns: LeaseReturnsFromPB(req.GetReturns())}
	for _, r := range req.GetReleases() {
		t.Releases = append(t.Releases, leasehold.Release{Key: string(r.GetKey()), Limit: LimitFromPB(r.GetLimit()), ID: r.GetId(), Cost: r.GetCost()})
	}
	for _, a := range req.GetAsks() {
		t.Asks = append(t.Asks, leasehold.Ask{Key: string(a.GetKey()), Limit: LimitFromPB(a.GetLimit()), K: a.GetK(), Length: time.Duration(a.GetLengthUs()) * time.Microsecond})
	}
	return t
}

// LeaseGrantsToPB answers a LeaseRequest.
func LeaseGrantsToPB(gs []leasehold.Grant) *pb.LeaseResponse {
	resp := &pb.LeaseResponse{Grants: make([]*pb.LeaseGrant, len(gs))}
	for i, g := range gs {
		resp.Grants[i] = &pb.LeaseGrant{Id: g.ID, K: g.K, LengthUs: g.Length.Microseconds(), Owner: g.Owner}
	}
	return resp
}

// LeaseGrantsFromPB reads a LeaseResponse's grants (keys and limits are
// the asks', which the holder fills in).
func LeaseGrantsFromPB(resp *pb.LeaseResponse) []leasehold.Grant {
	gs := make([]leasehold.Grant, len(resp.GetGrants()))
	for i, g := range resp.GetGrants() {
		gs[i] = leasehold.Grant{ID: g.GetId(), K: g.GetK(), Owner: g.GetOwner(), Length: time.Duration(g.GetLengthUs()) * time.Microsecond}
	}
	return gs
}

// LeaseReturnsToPB carries returns over the wire.
func LeaseReturnsToPB(rs []leasehold.Return) []*pb.LeaseReturn {
	out := make([]*pb.LeaseReturn, len(rs))
	for i, r := range rs {
		m := &pb.LeaseReturn{Id: r.ID, Key: []byte(r.Key), Limit: LimitToPB(r.Limit), K: r.K, Uses: make([]*pb.LeaseUse, len(r.Uses))}
		for j, u := range r.Uses {
			m.Uses[j] = &pb.LeaseUse{Id: u.ID, Cost: u.Cost, AgeUs: u.AgeUs}
		}
		out[i] = m
	}
	return out
}

// LeaseReturnsFromPB is LeaseReturnsToPB's inverse. Ages below 0 read as
// 0 (a use is never younger than the return), costs below 1 as 1.
func LeaseReturnsFromPB(rs []*pb.LeaseReturn) []leasehold.Return {
	out := make([]leasehold.Return, len(rs))
	for i, r := range rs {
		ret := leasehold.Return{ID: r.GetId(), Key: string(r.GetKey()), Limit: LimitFromPB(r.GetLimit()), K: r.GetK(), Uses: make([]leasehold.Use, len(r.GetUses()))}
		for j, u := range r.GetUses() {
			ret.Uses[j] = leasehold.Use{ID: u.GetId(), Cost: max(u.GetCost(), 1), AgeUs: max(u.GetAgeUs(), 0)}
			ret.Used += ret.Uses[j].Cost
		}
		out[i] = ret
	}
	return out
}
