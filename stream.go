package ringlimit

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// A client's hot path goes over MultiStream: one long-lived stream per
// node, each batch a message with an id. A unary Multi pays for headers,
// a new HTTP/2 stream, a handler dispatch and trailers on every batch;
// on a stream a batch is one DATA frame each way.

// streams ends a node's long-lived streams (MultiStream, health Watch)
// when it shuts down: one would otherwise hold GracefulStop until its
// client closed it.
type streams struct {
	ctx context.Context
	end context.CancelFunc
	wg  sync.WaitGroup
}

func newStreams() *streams {
	ctx, cancel := context.WithCancel(context.Background())
	return &streams{ctx: ctx, end: cancel}
}

// MultiStream answers each request of the stream as Multi would, in order.
func (s *clientServer) MultiStream(stream pb.Limiter_MultiStreamServer) error {
	done := make(chan error, 1)
	st := s.n.streams
	sub := s.n.pushes.subscribe()
	defer s.n.pushes.unsubscribe(sub)
	// Answers and pushed invalidations share the stream: gRPC allows one
	// Send at a time.
	var sendMu sync.Mutex
	send := func(m *pb.MultiResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	st.wg.Add(2)
	go func() {
		defer st.wg.Done()
		done <- s.serveStream(stream, send)
	}()
	go func() {
		defer st.wg.Done()
		push(stream.Context(), sub, send)
	}()
	select {
	case err := <-done:
		return err
	case <-st.ctx.Done():
		// Returning ends the stream; the loop's Recv then fails and it
		// stops (shutdownServers waits for it).
		return status.Error(codes.Unavailable, "ringlimit: node shutting down")
	}
}

func (s *clientServer) serveStream(stream pb.Limiter_MultiStreamServer, send func(*pb.MultiResponse) error) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// The longest of the calls' timeouts bounds the request, as the
		// RPC deadline (the longest caller's) bounds a unary Multi.
		var longest int64
		for _, c := range req.GetCalls() {
			longest = max(longest, c.GetTimeoutUs())
		}
		timeout := DefaultTimeout
		if longest > 0 {
			timeout = time.Duration(longest) * time.Microsecond
		}
		ctx, cancel := context.WithTimeout(stream.Context(), timeout)
		resp, err := s.Multi(ctx, req) // Multi answers errors per call
		cancel()
		if err != nil {
			// A request past --max-calls: end the stream with Multi's
			// ResourceExhausted (answering each call would cost what the
			// bound saves).
			return err
		}
		resp.Id = req.GetId()
		if err := send(resp); err != nil {
			return err
		}
	}
}

// push sends a stream's pending invalidations until the stream ends.
func push(ctx context.Context, sub *pushSub, send func(*pb.MultiResponse) error) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.wake:
		}
		if m := sub.take(); m != nil && send(m) != nil {
			return
		}
	}
}
