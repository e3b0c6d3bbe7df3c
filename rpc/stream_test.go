package rpc_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// heldLimiter is a node whose MultiStream answers nothing until the test
// lets it; then it answers everything it holds, allowed, and what comes
// after at once.
type heldLimiter struct {
	pb.UnimplementedLimiterServer
	held chan struct{} // closed: answer
	got  atomic.Int64  // requests received
}

func (h *heldLimiter) MultiStream(st pb.Limiter_MultiStreamServer) error {
	var queue []*pb.MultiRequest
	reqs := make(chan *pb.MultiRequest)
	go func() {
		defer close(reqs)
		for {
			req, err := st.Recv()
			if err != nil {
				return
			}
			h.got.Add(1)
			reqs <- req
		}
	}()
	answer := func(req *pb.MultiRequest) error {
		resp := &pb.MultiResponse{Id: req.GetId()}
		for range req.GetCalls() {
			resp.Results = append(resp.Results, &pb.CallResult{Verdict: &pb.Verdict{Allowed: true}})
		}
		return st.Send(resp)
	}
	held := h.held
	for {
		select {
		case req, ok := <-reqs:
			if !ok {
				return nil
			}
			if held != nil {
				queue = append(queue, req)
				continue
			}
			if err := answer(req); err != nil {
				return err
			}
		case <-held:
			held = nil
			for _, req := range queue {
				if err := answer(req); err != nil {
					return err
				}
			}
			queue = nil
		}
	}
}

func serveHeld(t *testing.T, h *heldLimiter) pb.LimiterClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterLimiterServer(s, h)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// Connected before the test's short deadlines start: on a busy
	// machine a first connect can take longer than they do.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("no connection to the test node in 10 s (state %v)", s)
		}
	}
	return pb.NewLimiterClient(conn)
}

// A request whose wait ends with its context keeps its place on the
// stream when the context carries a late handler (rpc.WithLate), and its
// answer goes there when it comes; one without a handler is dropped; and a
// stream keeps at most 1,024 such places (a node that never answers cannot
// make a caller hold memory without bound).
func TestStreamLateAnswers(t *testing.T) {
	h := &heldLimiter{held: make(chan struct{})}
	ms := rpc.NewMultiStream(serveHeld(t, h), nil)
	defer ms.Close()

	const withLate, without = 1100, 20
	var lates atomic.Int64
	var wg sync.WaitGroup
	late := func(resp any) {
		if r, ok := resp.(*pb.MultiResponse); ok && len(r.GetResults()) == 1 && r.GetResults()[0].GetVerdict().GetAllowed() {
			lates.Add(1)
		}
	}
	errs := make(chan error, withLate+without)
	for i := 0; i < withLate+without; i++ {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if i < withLate {
				ctx = rpc.WithLate(ctx, late)
			}
			_, err := ms.Do(ctx, []*pb.Call{{Entries: []*pb.Entry{{Key: []byte("k"), Limit: &pb.Limit{Uses: 1, WindowMs: 1000}}}}})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a held request: %v; want its deadline", err)
		}
	}
	if got := h.got.Load(); got != withLate+without {
		t.Fatalf("the node got %d requests, want %d", got, withLate+without)
	}
	close(h.held)
	// A request sent after the answers shows they have all been read.
	if _, err := ms.Do(context.Background(), []*pb.Call{{Entries: []*pb.Entry{{Key: []byte("k"), Limit: &pb.Limit{Uses: 1, WindowMs: 1000}}}}}); err != nil {
		t.Fatal(err)
	}
	ms.Close() // waits for the late handlers
	if got := lates.Load(); got != 1024 {
		t.Fatalf("%d late answers handed over, want 1024 (the bound; %d asked for one, %d did not)", got, withLate, without)
	}
}
