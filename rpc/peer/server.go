package peer

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Server is the gRPC end of the peer API: it turns each request into the
// core's domain types, asks the router, and turns the answer back.
type Server struct {
	pb.UnimplementedPeerServer
	r       *owner.Router
	client  *Client // learns the addresses of askers this node does not know yet
	streams *streams
	// recaller answers recalls of this node's own leases (see lease.go).
	recaller atomic.Pointer[Recaller]
}

// NewServer serves router's peer API. client, when set, learns the
// addresses askers give (a node that asked before this node saw it join).
func NewServer(router *owner.Router, client *Client) *Server {
	return &Server{r: router, client: client, streams: newStreams()}
}

var _ pb.PeerServer = (*Server)(nil)

// Forward decides calls a peer sent for keys this node owns.
func (s *Server) Forward(ctx context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	return s.forward(ctx, req), nil
}

func (s *Server) forward(ctx context.Context, req *pb.ForwardRequest) *pb.ForwardResponse {
	calls := make([]owner.Call, len(req.GetCalls()))
	bad := make([]error, len(calls))
	for i, c := range req.GetCalls() {
		if err := rpc.CheckWindows(c.GetEntries()); err != nil {
			bad[i] = err
			continue
		}
		calls[i] = owner.Call{
			Entries: rpc.EntriesFromPB(c.GetEntries()), Peek: c.GetPeek(), Hops: c.GetHops(), Final: c.GetFinal(),
			Timeout: limiter.MicrosDuration(c.GetTimeoutUs()),
		}
	}
	// Calls the wire already refused are not asked: the core gets only
	// those it can read, and their results are put back in order.
	ok := calls[:0:0]
	for i := range calls {
		if bad[i] == nil {
			ok = append(ok, calls[i])
		}
	}
	results := s.r.Serve(ctx, req.GetFrom(), ok)
	resp := &pb.ForwardResponse{Results: make([]*pb.CallResult, len(calls))}
	j := 0
	for i := range calls {
		if bad[i] != nil {
			resp.Results[i] = &pb.CallResult{Error: rpc.ErrorToPB(bad[i])}
			continue
		}
		resp.Results[i] = resultToPB(results[j], calls[i].Entries, s.r.Self(), req.GetLeanReceipts())
		j++
	}
	return resp
}

// Release gives back uses recorded here.
func (s *Server) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	if err := s.r.ServeRelease(ctx, ReceiptsFromPB(req.GetReceipts()), limiter.MicrosDuration(req.GetElapsedUs())); err != nil {
		return nil, rpc.ToStatus(err)
	}
	return &pb.ReleaseResponse{}, nil
}

// Invalidate drops cached refusals of keys whose owner gave uses back.
func (s *Server) Invalidate(ctx context.Context, req *pb.InvalidateRequest) (*pb.StateResponse, error) {
	keys := make([]string, len(req.GetKeys()))
	for i, k := range req.GetKeys() {
		keys[i] = string(k)
	}
	s.r.ServeInvalidate(keys)
	return &pb.StateResponse{}, nil
}

// HandOff merges state of keys this node now owns, within the bounds.
func (s *Server) HandOff(ctx context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	b, err := stateBatch(req)
	if err != nil {
		return nil, rpc.ToStatus(err)
	}
	ack, err := s.r.ServeHandOff(b)
	if err != nil {
		return nil, rpc.ToStatus(err)
	}
	return ackToPB(ack), nil
}

// Replicate keeps an owner's latest state of its keys, within the bounds.
func (s *Server) Replicate(ctx context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	resp, err := s.replicate(req)
	if err != nil {
		return nil, rpc.ToStatus(err)
	}
	return resp, nil
}

// replicate serves one Replicate, unary or on ReplicateStream.
func (s *Server) replicate(req *pb.StateRequest) (*pb.StateResponse, error) {
	b, err := stateBatch(req)
	if err != nil {
		return nil, err
	}
	ack, err := s.r.ServeReplicate(b)
	if err != nil {
		return nil, err
	}
	return ackToPB(ack), nil
}

// Fetch answers a new owner's first-use question, and gives the counters
// up to it: later calls for them are passed on.
func (s *Server) Fetch(ctx context.Context, req *pb.FetchRequest) (*pb.FetchResponse, error) {
	if s.client != nil {
		s.client.Learn(req.GetFrom(), req.GetFromAddr())
	}
	ans := s.r.ServeFetch(owner.FetchRequest{Counters: CountersFromPB(req.GetCounters()), From: req.GetFrom(), FromAddr: req.GetFromAddr(), NoClaim: req.GetNoClaim()})
	resp := &pb.FetchResponse{States: rpc.StatesToPB(ans.States)}
	for _, h := range ans.Held {
		resp.Held = append(resp.Held, &pb.FetchResponse_Held{Key: []byte(h.Key), Holder: h.Holder})
	}
	return resp, nil
}

// stateBatch reads a StateRequest, refusing a window no Duration holds
// (naming "states[i].window_ms") or malformed packed logs (CheckPacked)
// before the core checks the rest.
func stateBatch(req *pb.StateRequest) (owner.StateBatch, error) {
	max := int64(limiter.MaxWindow / time.Millisecond)
	for i, s := range req.GetStates() {
		if w := s.GetWindowMs(); w <= 0 || w > max {
			return owner.StateBatch{}, &limiter.InputError{Field: "states[" + strconv.Itoa(i) + "].window_ms", Reason: fmt.Sprintf("must be from 1 to %d, got %d", max, w)}
		}
	}
	states, err := rpc.StatesFromRequest(req)
	if err != nil {
		return owner.StateBatch{}, err
	}
	return owner.StateBatch{From: req.GetFrom(), States: states, RingVersion: req.GetRingVersion(), Final: req.GetFinal()}, nil
}

// ackToPB answers a StateRequest; every answer says that this node reads
// packed logs (StatesFromRequest), so its peers may send them.
func ackToPB(a owner.StateAck) *pb.StateResponse {
	return &pb.StateResponse{MergesDeltas: a.MergesDeltas, Missing: CountersToPB(a.Missing), PacksLogs: true}
}
