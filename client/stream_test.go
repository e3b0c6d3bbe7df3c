package client_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// fakeLimiter allows every call and counts which API carried it; without
// stream it has no MultiStream, as a node of an older version.
type fakeLimiter struct {
	pb.UnimplementedLimiterServer
	unary, streamed atomic.Int64
}

func (f *fakeLimiter) Multi(_ context.Context, req *pb.MultiRequest) (*pb.MultiResponse, error) {
	f.unary.Add(int64(len(req.GetCalls())))
	return answerAll(req), nil
}

func answerAll(req *pb.MultiRequest) *pb.MultiResponse {
	resp := &pb.MultiResponse{Id: req.GetId()}
	for range req.GetCalls() {
		resp.Results = append(resp.Results, &pb.CallResult{Verdict: &pb.Verdict{Allowed: true}})
	}
	return resp
}

type streamingLimiter struct{ *fakeLimiter }

func (s streamingLimiter) MultiStream(st pb.Limiter_MultiStreamServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		s.streamed.Add(int64(len(req.GetCalls())))
		if err := st.Send(answerAll(req)); err != nil {
			return err
		}
	}
}

func serveFake(t *testing.T, srv pb.LimiterServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterLimiterServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func consumeN(t *testing.T, addr string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.DialConfig(ctx, client.Config{Addrs: []string{addr}, RoundRobin: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lim := limiter.Limit{Uses: 5, Window: time.Minute}
	for i := range n {
		v, err := limiter.Consume(ctx, c, "k", lim)
		if err != nil || !v.Allowed {
			t.Fatalf("call %d: %+v, %v", i, v, err)
		}
	}
}

// The client sends its batches over MultiStream when the node has it.
func TestClientUsesMultiStream(t *testing.T) {
	f := &fakeLimiter{}
	consumeN(t, serveFake(t, streamingLimiter{f}), 20)
	if got, u := f.streamed.Load(), f.unary.Load(); got != 20 || u != 0 {
		t.Fatalf("streamed %d calls and sent %d unary; want 20 and 0", got, u)
	}
}

// A node without MultiStream (an older version) still answers: the client
// falls back to unary Multi, the failed stream attempt included.
func TestClientFallsBackToMulti(t *testing.T) {
	f := &fakeLimiter{}
	consumeN(t, serveFake(t, f), 20)
	if got := f.unary.Load(); got != 20 {
		t.Fatalf("unary Multi carried %d calls, want 20", got)
	}
}
