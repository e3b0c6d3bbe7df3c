package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/member"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// FallbackHeader is the gRPC response header that Consume and Peek carry
// when the node's failure policy decided the verdict because the key's
// owner did not answer within the node's timeout: the policy's name
// ("deny", "allow" or "local"). Such a verdict says nothing about the
// cluster's count (a local one is this node's share of the limit), so a
// caller that audits counts, like the chaos suite, tells the two apart by
// it.
const FallbackHeader = "ringlimit-fallback"

// Node is what the client API asks of a node.
type Node interface {
	// ConsumeMany and PeekMany are the node as its callers reach it.
	limiter.Store
	// Local reports whether the node decides entries itself, without a
	// round trip (a Multi decides those inline).
	Local(entries []limiter.Entry) bool
	// Members lists the members the node knows.
	Members() []member.Member
	// RingVersion is the version of the ring the node routes by.
	RingVersion() uint64
	// Owner returns key's owner as the node knows it; a bad key is an
	// *limiter.InputError naming "key".
	Owner(key string) (member.Member, error)
}

// Config configures a Server. Node is required.
type Config struct {
	// Node answers the calls.
	Node Node
	// MaxCalls bounds the calls of one Multi or MultiStream message.
	// Default 1024.
	MaxCalls int
	// MaxBodyBytes bounds a JSON request body. Default 1 MiB.
	MaxBodyBytes int64
	// Timeout bounds a MultiStream message whose calls carry no timeout
	// of their own. Default 250 ms.
	Timeout time.Duration
	// Clock reads the time the JSON API's draft headers are written
	// from. Default the process clock.
	Clock limiter.Clock
	// MaxReleases bounds the releases kept for clients that asked for
	// them (a receipt is an id into that table). Default 1<<20.
	MaxReleases int
}

// Server is a node's client API: gRPC (Register), JSON (Mount) and health
// (Health). It is safe for concurrent use.
type Server struct {
	pb.UnimplementedLimiterServer
	cfg      Config
	releases *releases
	pushes   *pushes
	streams  *streams
	recalls  *recallers
}

var _ pb.LimiterServer = (*Server)(nil)

// New returns a server for cfg.Node.
func New(cfg Config) (*Server, error) {
	if cfg.Node == nil {
		return nil, fmt.Errorf("%w: api.Config.Node is required", limiter.ErrInvalid)
	}
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = 1024
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 250 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.RealClock
	}
	if cfg.MaxReleases <= 0 {
		cfg.MaxReleases = 1 << 20
	}
	return &Server{cfg: cfg, releases: newReleases(cfg.MaxReleases), pushes: newPushes(), streams: newStreams(), recalls: newRecallers()}, nil
}

// Register registers the Limiter service on s.
func (s *Server) Register(r grpc.ServiceRegistrar) { pb.RegisterLimiterServer(r, s) }

// Invalidate pushes keys whose uses were given back to every open
// MultiStream (clients drop refusals they cached for them). It never
// blocks on a stream.
func (s *Server) Invalidate(keys []string) { s.pushes.invalidate(keys) }

// EndStreams ends the long-lived streams (MultiStream, health Watch): one
// would otherwise hold a graceful stop until its client closed it.
func (s *Server) EndStreams() { s.streams.end() }

// WaitStreams waits for the streams' handlers to return (after
// EndStreams and the gRPC server's stop).
func (s *Server) WaitStreams() { s.streams.wg.Wait() }

func (s *Server) Consume(ctx context.Context, req *pb.ConsumeRequest) (*pb.ConsumeResponse, error) {
	return s.one(ctx, &pb.Call{Entries: req.GetEntries(), WantRelease: req.GetWantRelease()})
}

func (s *Server) Peek(ctx context.Context, req *pb.ConsumeRequest) (*pb.ConsumeResponse, error) {
	return s.one(ctx, &pb.Call{Entries: req.GetEntries(), Peek: true})
}

func (s *Server) one(ctx context.Context, c *pb.Call) (*pb.ConsumeResponse, error) {
	entries, err := entriesOf(c)
	if err != nil {
		return nil, rpc.ToStatus(err)
	}
	r, failure := s.callFailure(ctx, c, entries)
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
func (s *Server) Multi(ctx context.Context, req *pb.MultiRequest) (*pb.MultiResponse, error) {
	calls := req.GetCalls()
	if err := s.checkCalls(len(calls)); err != nil {
		return nil, err
	}
	resp := &pb.MultiResponse{Results: make([]*pb.CallResult, len(calls))}
	if len(calls) == 1 {
		resp.Results[0] = s.call(ctx, calls[0])
		return resp, nil
	}
	if cn, ok := s.cfg.Node.(limiter.CallsStore); ok {
		s.together(ctx, cn, calls, resp)
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
		if s.cfg.Node.Local(entries) {
			resp.Results[i] = s.callEntries(ctx, c, entries)
			continue
		}
		wg.Go(func() { resp.Results[i] = s.callEntries(ctx, c, entries) })
	}
	wg.Wait()
	return resp, nil
}

// together answers a Multi's calls on a node that decides them together
// (the calls for one owner go to it in one message).
func (s *Server) together(ctx context.Context, cn limiter.CallsStore, calls []*pb.Call, resp *pb.MultiResponse) {
	sc := togetherScratches.Get().(*togetherScratch)
	defer sc.done()
	lcs, idx := sc.calls[:0], sc.idx[:0]
	// The calls' entries share one array, and the results and verdicts
	// one each: three allocations a request rather than three a call. (Not
	// pooled: a verdict's Release may keep its entries.)
	total := 0
	for _, c := range calls {
		total += len(c.GetEntries())
	}
	slab := make([]limiter.Entry, total)
	for i, c := range calls {
		if err := rpc.CheckWindows(c.GetEntries()); err != nil {
			resp.Results[i] = &pb.CallResult{Error: rpc.ErrorToPB(err)}
			continue
		}
		n := len(c.GetEntries())
		entries := rpc.EntriesFromPBInto(slab[:n:n], c.GetEntries())
		slab = slab[n:]
		lcs = append(lcs, limiter.Call{Entries: entries, Peek: c.GetPeek(), Release: c.GetWantRelease() && !c.GetPeek()})
		idx = append(idx, i)
	}
	outs := slices.Grow(sc.outs[:0], len(lcs))[:len(lcs)]
	sc.calls, sc.idx, sc.outs = lcs, idx, outs
	cn.Calls(ctx, lcs, outs)
	results := make([]pb.CallResult, len(idx))
	verdicts := make([]pb.Verdict, len(idx))
	for j, i := range idx {
		resp.Results[i] = &results[j]
		s.resultInto(&results[j], &verdicts[j], outs[j].Verdict, outs[j].Err)
	}
}

// togetherScratch is what together builds per request, kept for the next
// (a loaded node answers thousands of Multis a second): nothing in it is
// used once together returns.
type togetherScratch struct {
	calls []limiter.Call
	idx   []int
	outs  []limiter.CallResult
}

var togetherScratches = sync.Pool{New: func() any { return new(togetherScratch) }}

// done clears the scratch (its entries and verdicts point into the request
// and at release funcs) and gives it back; one grown past a request's
// usual size is dropped.
func (sc *togetherScratch) done() {
	if cap(sc.outs) > 256 {
		return
	}
	clear(sc.calls)
	clear(sc.outs)
	sc.calls, sc.idx, sc.outs = sc.calls[:0], sc.idx[:0], sc.outs[:0]
	togetherScratches.Put(sc)
}

// checkCalls refuses a request of more than MaxCalls calls: each call
// holds a goroutine or a counter, so one request must not take a node's
// memory (issue 17: 100,000 calls in one Multi).
func (s *Server) checkCalls(calls int) error {
	if calls > s.cfg.MaxCalls {
		return rpc.ToStatus(&limiter.InputError{Field: "calls", Bound: true,
			Reason: fmt.Sprintf("%d calls in one request, more than the bound of %d (--max-calls)", calls, s.cfg.MaxCalls)})
	}
	return nil
}

func (s *Server) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	var errs []error
	for _, r := range req.GetReceipts() {
		errs = append(errs, s.releases.release(ctx, r.GetId()))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, rpc.ToStatus(err)
	}
	return &pb.ReleaseResponse{}, nil
}

func (s *Server) Members(ctx context.Context, _ *pb.MembersRequest) (*pb.MembersResponse, error) {
	resp := &pb.MembersResponse{RingVersion: s.cfg.Node.RingVersion()}
	for _, m := range s.cfg.Node.Members() {
		resp.Members = append(resp.Members, memberToPB(m))
	}
	return resp, nil
}

func (s *Server) Owner(ctx context.Context, req *pb.OwnerRequest) (*pb.OwnerResponse, error) {
	m, err := s.cfg.Node.Owner(string(req.GetKey()))
	if errors.Is(err, limiter.ErrInvalid) {
		return nil, rpc.ToStatus(err) // InvalidArgument (ResourceExhausted past the key bound)
	}
	if err != nil {
		return nil, rpc.ToStatus(errors.Join(rpc.ErrUnavailable, err))
	}
	return &pb.OwnerResponse{Owner: memberToPB(m), RingVersion: s.cfg.Node.RingVersion()}, nil
}

func memberToPB(m member.Member) *pb.Member {
	return &pb.Member{Name: m.Name, GossipAddr: m.GossipAddr, GrpcAddr: m.GRPCAddr, State: m.State, Version: m.Version}
}

// call decides one client call and returns its receipts as ages, so the
// client can release it later through any node.
//
// The call's own timeout is not turned into a context here (a timer per
// call): the RPC's deadline covers every call it carries, and the node
// bounds each wait for an owner by its Timeout anyway.
func (s *Server) call(ctx context.Context, c *pb.Call) *pb.CallResult {
	entries, err := entriesOf(c)
	if err != nil {
		return &pb.CallResult{Error: rpc.ErrorToPB(err)}
	}
	return s.callEntries(ctx, c, entries)
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
func (s *Server) callEntries(ctx context.Context, c *pb.Call, entries []limiter.Entry) *pb.CallResult {
	r, _ := s.callFailure(ctx, c, entries)
	return r
}

// callFailure is callEntries that also returns the verdict's Failure (set
// when the failure policy decided it).
func (s *Server) callFailure(ctx context.Context, c *pb.Call, entries []limiter.Entry) (*pb.CallResult, error) {
	var v limiter.Verdict
	var err error
	n := s.cfg.Node
	if c.GetPeek() {
		v, err = n.PeekMany(ctx, entries)
	} else if c.GetWantRelease() {
		v, err = n.ConsumeMany(limiter.WithRelease(ctx), entries)
	} else {
		v, err = n.ConsumeMany(ctx, entries)
	}
	return s.resultOf(v, err), v.Failure
}

// resultOf turns one call's answer into its wire form.
func (s *Server) resultOf(v limiter.Verdict, err error) *pb.CallResult {
	out := &pb.CallResult{}
	s.resultInto(out, nil, v, err)
	return out
}

// resultInto is resultOf into a zero out, with the verdict in vp (nil: a
// new one).
func (s *Server) resultInto(out *pb.CallResult, vp *pb.Verdict, v limiter.Verdict, err error) {
	if err != nil {
		out.Error = rpc.ErrorToPB(err)
		return
	}
	if vp == nil {
		vp = &pb.Verdict{}
	}
	rpc.VerdictToPBInto(v, vp)
	out.Verdict = vp
	if v.Release != nil {
		out.Receipts = s.receiptsOf(v)
	}
}

// receiptsOf turns a verdict's Release into a receipt a client sends back
// to this node: the node keeps the Release (which knows the owners and the
// ages) in a table until the uses would have left their windows anyway.
func (s *Server) receiptsOf(v limiter.Verdict) []*pb.Receipt {
	return []*pb.Receipt{{Id: s.releases.put(v.Release, v.ResetAt)}}
}
