package ringlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// FallbackHeader is the gRPC response header that Consume and Peek carry
// when the node's failure policy decided the verdict because the key's
// owner did not answer within Timeout: the policy's name ("deny", "allow"
// or "local"). Such a verdict says nothing about the cluster's count (a
// local one is this node's share of the limit), so a caller that audits
// counts, like the chaos suite, tells the two apart by it.
const FallbackHeader = "ringlimit-fallback"

// clientServer is the client gRPC API of a node.
type clientServer struct {
	pb.UnimplementedLimiterServer
	n *Node
}

func (s *clientServer) Consume(ctx context.Context, req *pb.ConsumeRequest) (*pb.ConsumeResponse, error) {
	return s.one(ctx, &pb.Call{Entries: req.GetEntries(), WantRelease: req.GetWantRelease()})
}

func (s *clientServer) Peek(ctx context.Context, req *pb.ConsumeRequest) (*pb.ConsumeResponse, error) {
	return s.one(ctx, &pb.Call{Entries: req.GetEntries(), Peek: true})
}

func (s *clientServer) one(ctx context.Context, c *pb.Call) (*pb.ConsumeResponse, error) {
	entries, err := entriesOf(c)
	if err != nil {
		return nil, rpc.ToStatus(err)
	}
	r, failure := s.n.callFailure(ctx, c, entries)
	if r.Error != nil {
		return nil, rpc.ToStatus(rpc.ErrorFromPB(r.Error))
	}
	var fe *fallback.FailureError
	if errors.As(failure, &fe) {
		_ = grpc.SetHeader(ctx, metadata.Pairs(FallbackHeader, fe.Policy.String()))
	}
	return &pb.ConsumeResponse{Verdict: r.Verdict, Receipts: r.Receipts}, nil
}

// Multi runs many independent calls; each goes its own way (local engine
// or forwarder), so one slow owner does not hold up the others.
func (s *clientServer) Multi(ctx context.Context, req *pb.MultiRequest) (*pb.MultiResponse, error) {
	calls := req.GetCalls()
	if err := s.n.checkCalls(len(calls)); err != nil {
		return nil, err
	}
	resp := &pb.MultiResponse{Results: make([]*pb.CallResult, len(calls))}
	if len(calls) == 1 {
		resp.Results[0] = s.n.call(ctx, calls[0])
		return resp, nil
	}
	// Calls this node owns are decided inline (microseconds, no
	// goroutine); the others wait on their owners concurrently, where the
	// per-peer forwarders batch them.
	var wg sync.WaitGroup
	for i, c := range calls {
		entries, err := entriesOf(c)
		if err != nil {
			resp.Results[i] = &pb.CallResult{Error: rpc.ErrorToPB(err)}
			continue
		}
		if s.n.router.Local(entries) {
			resp.Results[i] = s.n.callEntries(ctx, c, entries)
			continue
		}
		wg.Go(func() { resp.Results[i] = s.n.callEntries(ctx, c, entries) })
	}
	wg.Wait()
	return resp, nil
}

// checkCalls refuses a request of more than MaxCalls calls: each call
// holds a goroutine or a counter, so one request must not take a node's
// memory (issue 17: 100,000 calls in one Multi).
func (n *Node) checkCalls(calls int) error {
	if calls > n.cfg.MaxCalls {
		return rpc.ToStatus(&limiter.InputError{Field: "calls", Bound: true,
			Reason: fmt.Sprintf("%d calls in one request, more than the bound of %d (--max-calls)", calls, n.cfg.MaxCalls)})
	}
	return nil
}

func (s *clientServer) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	var errs []error
	for _, r := range req.GetReceipts() {
		errs = append(errs, s.n.releases.release(ctx, r.GetId()))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, rpc.ToStatus(err)
	}
	return &pb.ReleaseResponse{}, nil
}

func (s *clientServer) Members(ctx context.Context, _ *pb.MembersRequest) (*pb.MembersResponse, error) {
	resp := &pb.MembersResponse{RingVersion: s.n.members.Ring().Version()}
	for _, m := range s.n.Members() {
		resp.Members = append(resp.Members, &pb.Member{Name: m.Name, GossipAddr: m.GossipAddr, GrpcAddr: m.GRPCAddr, State: m.State, Version: m.Version})
	}
	return resp, nil
}

func (s *clientServer) Owner(ctx context.Context, req *pb.OwnerRequest) (*pb.OwnerResponse, error) {
	name, err := s.n.Owner(string(req.GetKey()))
	if errors.Is(err, limiter.ErrInvalid) {
		return nil, rpc.ToStatus(err) // InvalidArgument (ResourceExhausted past the key bound)
	}
	if err != nil {
		return nil, rpc.ToStatus(errors.Join(rpc.ErrUnavailable, err))
	}
	resp := &pb.OwnerResponse{Owner: &pb.Member{Name: name}, RingVersion: s.n.members.Ring().Version()}
	if c := s.n.members.Cluster(); c != nil {
		if m, ok := c.Member(name); ok {
			resp.Owner = &pb.Member{Name: m.Name, GossipAddr: m.GossipAddr, GrpcAddr: m.GRPCAddr, State: m.State, Version: m.Version}
		}
	}
	return resp, nil
}

// call decides one client call and returns its receipts as ages, so the
// client can release it later through any node.
//
// The call's own timeout is not turned into a context here (a timer per
// call): the RPC's deadline covers every call it carries, and the node
// bounds each wait for an owner by its Timeout anyway.
func (n *Node) call(ctx context.Context, c *pb.Call) *pb.CallResult {
	entries, err := entriesOf(c)
	if err != nil {
		return &pb.CallResult{Error: rpc.ErrorToPB(err)}
	}
	return n.callEntries(ctx, c, entries)
}

// entriesOf converts a client call's entries, refusing a window_ms too
// large for a Duration with the value sent (rpc.CheckWindows).
func entriesOf(c *pb.Call) ([]limiter.Entry, error) {
	if err := rpc.CheckWindows(c.GetEntries()); err != nil {
		return nil, err
	}
	return rpc.EntriesFromPB(c.GetEntries()), nil
}

// callEntries is call with c's entries already converted.
func (n *Node) callEntries(ctx context.Context, c *pb.Call, entries []limiter.Entry) *pb.CallResult {
	r, _ := n.callFailure(ctx, c, entries)
	return r
}

// callFailure is callEntries that also returns the verdict's Failure (set
// when the failure policy decided it).
func (n *Node) callFailure(ctx context.Context, c *pb.Call, entries []limiter.Entry) (*pb.CallResult, error) {
	var v limiter.Verdict
	var err error
	if c.GetPeek() {
		v, err = n.PeekMany(ctx, entries)
	} else if c.GetWantRelease() {
		v, err = n.ConsumeMany(limiter.WithRelease(ctx), entries)
	} else {
		v, err = n.ConsumeMany(ctx, entries)
	}
	if err != nil {
		return &pb.CallResult{Error: rpc.ErrorToPB(err)}, nil
	}
	out := &pb.CallResult{Verdict: rpc.VerdictToPB(v)}
	if v.Release != nil {
		out.Receipts = n.receiptsOf(v)
	}
	return out, v.Failure
}

// receiptsOf turns a verdict's Release into a receipt a client sends back
// to this node: the node keeps the Release (which knows the owners and the
// ages) in a table until the uses would have left their windows anyway.
func (n *Node) receiptsOf(v limiter.Verdict) []*pb.Receipt {
	return []*pb.Receipt{{Id: n.releases.put(v.Release, v.ResetAt)}}
}

func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/consume", func(w http.ResponseWriter, r *http.Request) { n.serveJSON(w, r, false) })
	mux.HandleFunc("POST /v1/peek", func(w http.ResponseWriter, r *http.Request) { n.serveJSON(w, r, true) })
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		type member struct {
			Name       string `json:"name"`
			GossipAddr string `json:"gossip_addr"`
			GRPCAddr   string `json:"grpc_addr"`
			State      string `json:"state"`
		}
		out := []member{}
		for _, m := range n.Members() {
			out = append(out, member{m.Name, m.GossipAddr, m.GRPCAddr, m.State})
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-n.closing:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		case <-n.ready:
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		default:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "joining"})
		}
	})
	n.mountMetrics(mux)
	return httpAuth(n.cfg.Security, mux)
}
