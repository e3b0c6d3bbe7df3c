package peer_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/rpc/peer"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// methods counts the peer methods a gRPC server was called with.
type methods struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *methods) add(method string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[method]++
}

func (m *methods) get(method string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[method]
}

func (m *methods) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			m.add(info.FullMethod)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			m.add(info.FullMethod)
			return h(srv, ss)
		}),
	}
}

// restart serves b's peer API again on its address, on a server with
// opts, the way a node of another version would.
func restart(t testing.TB, b *node, srv pb.PeerServer, opts ...grpc.ServerOption) {
	t.Helper()
	b.srv.Stop()
	lis := relisten(t, b.addr)
	s := grpc.NewServer(opts...)
	pb.RegisterPeerServer(s, srv)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
}

// relisten listens on addr again once the server stopped there has let
// it go.
func relisten(t testing.TB, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lis, err := net.Listen("tcp", addr)
		if err == nil {
			return lis
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Forwards to a peer travel over one ForwardStream, not a unary Forward
// per batch.
func TestForwardsTravelOverOneStream(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	var seen methods
	restart(t, b, peer.NewServer(b.router, b.client), seen.options()...)
	a.client.Rejoined("b")
	k := keyOwnedBy(t, a.router.RoutingRing(), "b")
	lim := limiter.Limit{Uses: 100, Window: time.Minute}
	for i := range 20 {
		v, err := a.router.ConsumeMany(t.Context(), []limiter.Entry{{Key: k, Limit: lim}})
		if err != nil || !v.Allowed {
			t.Fatalf("call %d: %+v %v", i+1, v, err)
		}
	}
	if got := seen.get("/ringlimit.v1.Peer/ForwardStream"); got != 1 {
		t.Errorf("%d ForwardStreams opened for 20 forwards, want 1", got)
	}
	if got := seen.get("/ringlimit.v1.Peer/Forward"); got != 0 {
		t.Errorf("%d unary Forwards, want none: the stream carries them", got)
	}
	if v, err := b.router.Engine().PeekMany(t.Context(), []limiter.Entry{{Key: k, Limit: lim}}); err != nil || v.Remaining != 79 {
		t.Fatalf("at b: %+v %v; want 79 left (100 - 20 - the peek itself)", v, err)
	}
}

// noStream is the peer API of a node from before ForwardStream.
type noStream struct{ *peer.Server }

func (noStream) ForwardStream(pb.Peer_ForwardStreamServer) error {
	return status.Error(codes.Unimplemented, "method ForwardStream not implemented")
}

// A peer of an older version, without ForwardStream, still gets every
// forward, as unary Forwards.
func TestForwardFallsBackToUnary(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	var seen methods
	restart(t, b, noStream{peer.NewServer(b.router, b.client)}, seen.options()...)
	a.client.Rejoined("b")
	k := keyOwnedBy(t, a.router.RoutingRing(), "b")
	lim := limiter.Limit{Uses: 3, Window: time.Minute}
	for i := range 4 {
		v, err := a.router.ConsumeMany(t.Context(), []limiter.Entry{{Key: k, Limit: lim}})
		if err != nil || v.Allowed != (i < 3) {
			t.Fatalf("call %d: %+v %v; want allowed %v", i+1, v, err, i < 3)
		}
	}
	if got := seen.get("/ringlimit.v1.Peer/Forward"); got < 3 {
		t.Errorf("%d unary Forwards, want every forward (4) after the stream was refused", got)
	}
}

// slowFirst answers a stream's first request only once a second one has
// been answered: requests on one ForwardStream are decided on their own,
// so a hop waiting at a peer never holds up the calls behind it.
type slowFirst struct {
	pb.UnimplementedPeerServer
	got, second chan struct{} // closed: the first request arrived; the second was answered
}

func (s *slowFirst) ForwardStream(st pb.Peer_ForwardStreamServer) error {
	var sendMu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for n := 0; ; n++ {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if n == 0 {
			close(s.got)
		}
		wg.Go(func() {
			if n == 0 {
				select {
				case <-s.second:
				case <-st.Context().Done():
					return
				}
			}
			resp := &pb.ForwardResponse{Id: req.GetId()}
			for range req.GetCalls() {
				resp.Results = append(resp.Results, &pb.CallResult{Verdict: &pb.Verdict{Allowed: true, Remaining: int64(n)}})
			}
			sendMu.Lock()
			_ = st.Send(resp)
			sendMu.Unlock()
			if n == 1 {
				close(s.second)
			}
		})
	}
}

// Answers come back to the request they answer, in the order the peer
// decides them: a Direct call sent while a batch waits at the peer is
// answered first.
func TestStreamAnswersOutOfOrder(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	slow := &slowFirst{got: make(chan struct{}), second: make(chan struct{})}
	restart(t, b, slow)
	a.client.Rejoined("b")
	k := keyOwnedBy(t, a.router.RoutingRing(), "b")
	call := owner.Call{Entries: []limiter.Entry{{Key: k, Limit: limiter.Limit{Uses: 5, Window: time.Minute}}}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	first := make(chan owner.Result, 1)
	go func() {
		res, err := a.client.Forward(ctx, "b", call)
		if err != nil {
			res.Err = err
		}
		first <- res
	}()
	select {
	case <-slow.got:
	case <-ctx.Done():
		t.Fatal("the first forward never reached b")
	}
	direct := call
	direct.Direct = true
	res, err := a.client.Forward(ctx, "b", direct)
	if err != nil || res.Err != nil || res.Verdict.Remaining != 1 {
		t.Fatalf("the direct call: %+v %v; want the second request's answer (1)", res, err)
	}
	if res := <-first; res.Err != nil || res.Verdict.Remaining != 0 {
		t.Fatalf("the first call: %+v; want the first request's answer (0)", res)
	}
}

// EndStreams ends the peers' open ForwardStreams, so the node's graceful
// stop is not held until its peers close them.
func TestEndStreamsLetsGracefulStopEnd(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	srv := peer.NewServer(b.router, b.client)
	b.srv.Stop()
	lis := relisten(t, b.addr)
	s := grpc.NewServer()
	pb.RegisterPeerServer(s, srv)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	a.client.Rejoined("b")
	k := keyOwnedBy(t, a.router.RoutingRing(), "b")
	if _, err := a.client.Forward(t.Context(), "b", owner.Call{Entries: []limiter.Entry{{Key: k, Limit: limiter.Limit{Uses: 5, Window: time.Minute}}}}); err != nil {
		t.Fatal(err)
	}
	srv.EndStreams()
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("GracefulStop still waits for a's ForwardStream after EndStreams")
	}
	// a's next forward opens a new stream, which the stopped server
	// refuses: an error, not a hang.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := a.client.Forward(ctx, "b", owner.Call{Entries: []limiter.Entry{{Key: k, Limit: limiter.Limit{Uses: 5, Window: time.Minute}}}}); err == nil {
		t.Fatal("a forward to a stopped node succeeded")
	}
}

// A node's calls for one owner, decided together (Router.Calls, a
// client's Multi), travel to it in one forward; each is still all or
// nothing on its own, and the calls this node owns are decided here.
func TestCallsForOneOwnerShareOneForward(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	rg := a.router.RoutingRing()
	lim := limiter.Limit{Uses: 2, Window: time.Minute}
	var calls []limiter.Call
	var remote, local []string
	for i := 0; len(remote) < 10 || len(local) < 3; i++ {
		k := fmt.Sprint("calls-", i)
		o, _ := rg.Owner(k)
		switch {
		case o == "b" && len(remote) < 10:
			remote = append(remote, k)
		case o == "a" && len(local) < 3:
			local = append(local, k)
		default:
			continue
		}
		calls = append(calls, limiter.Call{Entries: []limiter.Entry{{Key: k, Limit: lim}}})
	}
	// One of b's keys is spent already: its call alone is refused.
	spent := remote[0]
	for range 2 {
		if v, err := b.router.ConsumeMany(t.Context(), []limiter.Entry{{Key: spent, Limit: lim}}); err != nil || !v.Allowed {
			t.Fatalf("spending %s: %+v %v", spent, v, err)
		}
	}
	// A batch of two of b's keys, one of them spent, is refused whole.
	calls = append(calls, limiter.Call{Entries: []limiter.Entry{{Key: remote[1], Limit: lim}, {Key: spent, Limit: lim}}})
	rpcs0, fwd0 := a.client.Stats().RPCs.Load(), a.client.Stats().Calls.Load()
	out := make([]limiter.CallResult, len(calls))
	a.router.Calls(t.Context(), calls, out)
	if rpcs, fwd := a.client.Stats().RPCs.Load()-rpcs0, a.client.Stats().Calls.Load()-fwd0; rpcs != 1 || fwd != 11 {
		t.Errorf("the calls went to b in %d forwards carrying %d calls; want 1 carrying 11", rpcs, fwd)
	}
	for i, c := range calls {
		k := c.Entries[0].Key
		want := len(c.Entries) == 1 && k != spent
		if out[i].Err != nil || out[i].Verdict.Allowed != want {
			t.Errorf("call %d (%v): %+v %v; want allowed %v", i, k, out[i].Verdict, out[i].Err, want)
		}
	}
	// remote[1] was counted once (its own call), not by the refused batch.
	if v, err := b.router.Engine().PeekMany(t.Context(), []limiter.Entry{{Key: remote[1], Limit: lim}}); err != nil || v.Remaining != 0 || !v.Allowed {
		t.Errorf("%s at b: %+v %v; want one use left (the refused batch counted nothing)", remote[1], v, err)
	}
	for _, k := range local {
		if v, err := a.router.Engine().PeekMany(t.Context(), []limiter.Entry{{Key: k, Limit: lim}}); err != nil || v.Remaining != 0 {
			t.Errorf("%s at a: %+v %v; want it counted here once", k, v, err)
		}
	}
}
