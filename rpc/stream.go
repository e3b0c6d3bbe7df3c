package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// The hot paths go over long-lived streams: a client's batches over
// MultiStream, a node's forwards over ForwardStream. A unary call pays
// for headers, a new HTTP/2 stream, a handler dispatch and trailers on
// every batch; on a stream a batch is one DATA frame each way.

// StreamEnds is what a Stream needs to know of one bidirectional RPC whose
// requests and responses carry ids.
type StreamEnds[Req, Resp any] struct {
	// Open opens the stream; ctx lives as long as the stream (it is
	// cancelled when the request that opens it gives up first). Required.
	Open func(ctx context.Context) (grpc.BidiStreamingClient[Req, Resp], error)
	// Unary sends one request without the stream: the fallback once the
	// server answered the stream UNIMPLEMENTED (an older version). Required.
	Unary func(ctx context.Context, req *Req) (*Resp, error)
	// SetID names a request; ID reads the id a response answers (0: a
	// message the server sent of its own accord). Required.
	SetID func(req *Req, id uint64)
	ID    func(resp *Resp) uint64
	// Pushed, when set, sees every response before it is delivered (a
	// server's pushes travel on the stream too).
	Pushed func(resp *Resp)
	// Broken, when set, is called when a stream ends: pushes may have
	// been lost with it.
	Broken func()
}

// Stream multiplexes requests over one long-lived stream, opened on first
// use and again after it breaks: each request gets an id, and the stream's
// reader hands each response to the request it answers, in whatever order
// the server answers. A server without the stream (it answered
// UNIMPLEMENTED) gets unary calls from then on.
type Stream[Req, Resp any] struct {
	ends  StreamEnds[Req, Resp]
	unary atomic.Bool

	mu     sync.Mutex
	cur    *openStream[Req, Resp]
	closed bool
	wg     sync.WaitGroup // the streams' readers
}

// NewStream returns a stream over ends; it opens nothing until first used.
func NewStream[Req, Resp any](ends StreamEnds[Req, Resp]) *Stream[Req, Resp] {
	return &Stream[Req, Resp]{ends: ends}
}

// openStream is one stream and the requests waiting for its answers.
type openStream[Req, Resp any] struct {
	st     grpc.BidiStreamingClient[Req, Resp]
	cancel context.CancelFunc
	sendMu sync.Mutex // gRPC allows one SendMsg at a time

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]waiter[Resp]
	lates   int   // waiters whose caller left, kept for a late answer
	err     error // why the stream ended; set once
}

// waiter is a request waiting for its answer: its caller on ch or, once
// the caller left (WithLate), late.
type waiter[Resp any] struct {
	ch   chan *Resp
	late func(resp any)
}

// maxLates bounds the answers one stream keeps a place for after their
// callers left: past it a late answer is dropped, as without WithLate.
const maxLates = 1024

type lateKey struct{}

// WithLate returns ctx carrying late, for a Stream's Do: when the wait for
// the answer ends with ctx (its deadline), the request keeps its place on
// the stream, and an answer that comes after is handed to late (in a
// goroutine of its own, which Close waits for) instead of being dropped.
// A node that counted a call after its caller gave up (a frozen node,
// thawed, reads the request late and cannot tell) answers it that way, and
// late can give the uses back. An answer that never comes (the stream
// breaks first) is not handed over.
func WithLate(ctx context.Context, late func(resp any)) context.Context {
	return context.WithValue(ctx, lateKey{}, late)
}

func lateOf(ctx context.Context) func(any) {
	late, _ := ctx.Value(lateKey{}).(func(any))
	return late
}

// Do sends req (its id is set here) and waits for its answer or ctx. The
// Stream owns req from here on.
func (m *Stream[Req, Resp]) Do(ctx context.Context, req *Req) (*Resp, error) {
	if m.unary.Load() {
		return m.ends.Unary(ctx, req)
	}
	os, err := m.stream(ctx)
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			m.unary.Store(true)
			return m.ends.Unary(ctx, req)
		}
		return nil, err
	}
	ch := make(chan *Resp, 1)
	id, err := os.register(ch)
	if err != nil {
		return nil, err
	}
	m.ends.SetID(req, id)
	// A failed Send means the stream is broken: its reader learns why
	// from Recv and closes ch, so the error itself is not needed here.
	os.sendMu.Lock()
	_ = os.st.Send(req)
	os.sendMu.Unlock()
	select {
	case r, ok := <-ch:
		if ok {
			return r, nil
		}
		err := os.failure()
		if status.Code(err) == codes.Unimplemented {
			m.unary.Store(true)
			m.ends.SetID(req, 0)
			return m.ends.Unary(ctx, req)
		}
		return nil, err
	case <-ctx.Done():
		if os.leave(id, lateOf(ctx)) {
			return nil, ctx.Err()
		}
		// The reader took the answer just now (or the stream ended): it
		// is on ch, in time after all.
		if r, ok := <-ch; ok {
			return r, nil
		}
		return nil, ctx.Err()
	}
}

// stream returns the open stream, opening one if there is none.
func (m *Stream[Req, Resp]) stream(call context.Context) (*openStream[Req, Resp], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrShuttingDown
	}
	if m.cur != nil {
		return m.cur, nil
	}
	// The stream outlives the request that opens it, but opening it (a
	// connection still coming up) waits no longer than that request.
	ctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(call, cancel)
	st, err := m.ends.Open(ctx)
	if !stop() && err == nil {
		err = fmt.Errorf("%w: opening the stream: %w", ErrUnavailable, call.Err())
	}
	if err != nil {
		cancel()
		return nil, err
	}
	os := &openStream[Req, Resp]{st: st, cancel: cancel, waiting: map[uint64]waiter[Resp]{}}
	m.cur = os
	m.wg.Add(1)
	go m.read(os)
	return os, nil
}

// read delivers the stream's answers until it ends, then fails the
// requests still waiting and lets the next request open a new stream.
func (m *Stream[Req, Resp]) read(os *openStream[Req, Resp]) {
	defer m.wg.Done()
	for {
		r, err := os.st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "ringlimit: the node ended the stream")
			}
			m.mu.Lock()
			if m.cur == os {
				m.cur = nil
			}
			m.mu.Unlock()
			os.fail(err)
			os.cancel()
			if m.ends.Broken != nil {
				m.ends.Broken()
			}
			return
		}
		if m.ends.Pushed != nil {
			m.ends.Pushed(r)
		}
		id := m.ends.ID(r)
		if id == 0 {
			continue // a push, answering no request
		}
		os.mu.Lock()
		w, ok := os.waiting[id]
		delete(os.waiting, id)
		if ok && w.late != nil {
			os.lates--
		}
		os.mu.Unlock()
		switch {
		case !ok:
		case w.late != nil:
			m.wg.Add(1) // read's own count is held: Close waits for it
			go func() {
				defer m.wg.Done()
				w.late(r)
			}()
		default:
			w.ch <- r
		}
	}
}

func (os *openStream[Req, Resp]) register(ch chan *Resp) (uint64, error) {
	os.mu.Lock()
	defer os.mu.Unlock()
	if os.err != nil {
		return 0, os.err
	}
	os.next++
	os.waiting[os.next] = waiter[Resp]{ch: ch}
	return os.next, nil
}

// leave ends a caller's wait for request id: its answer, when it comes,
// goes to late (when not nil and the stream keeps fewer than maxLates),
// else nowhere. False: the id was taken already (its answer is on its
// channel, or the stream ended and closed it).
func (os *openStream[Req, Resp]) leave(id uint64, late func(any)) bool {
	os.mu.Lock()
	defer os.mu.Unlock()
	if _, ok := os.waiting[id]; !ok {
		return false
	}
	if late != nil && os.lates < maxLates {
		os.waiting[id] = waiter[Resp]{late: late}
		os.lates++
	} else {
		delete(os.waiting, id)
	}
	return true
}

func (os *openStream[Req, Resp]) fail(err error) {
	os.mu.Lock()
	defer os.mu.Unlock()
	if os.err == nil {
		os.err = err
	}
	for id, w := range os.waiting {
		if w.ch != nil {
			close(w.ch)
		}
		delete(os.waiting, id)
	}
	os.lates = 0
}

func (os *openStream[Req, Resp]) failure() error {
	os.mu.Lock()
	defer os.mu.Unlock()
	if os.err == nil {
		return fmt.Errorf("%w: stream ended", ErrUnavailable)
	}
	return os.err
}

// Close ends the open stream and waits for its reader; requests after it
// fail with ErrShuttingDown.
func (m *Stream[Req, Resp]) Close() {
	m.mu.Lock()
	m.closed = true
	os := m.cur
	m.cur = nil
	m.mu.Unlock()
	if os != nil {
		os.sendMu.Lock()
		_ = os.st.CloseSend()
		os.sendMu.Unlock()
		os.cancel()
	}
	m.wg.Wait()
}

// MultiStream is the client end of a node's MultiStream (the server end
// is package rpc/api): one node's batches over a long-lived stream. A node
// without MultiStream (an older version) gets unary Multi calls.
type MultiStream struct {
	s *Stream[pb.MultiRequest, pb.MultiResponse]
}

// NewMultiStream returns the stream end for a node's Limiter client.
// invalidated, when set, gets the keys the node pushes (uses of them were
// given back), or all=true when every cached refusal must go: the node
// said so, or a stream ended and pushes may have been lost.
func NewMultiStream(api pb.LimiterClient, invalidated func(keys [][]byte, all bool)) *MultiStream {
	ends := StreamEnds[pb.MultiRequest, pb.MultiResponse]{
		Open: func(ctx context.Context) (grpc.BidiStreamingClient[pb.MultiRequest, pb.MultiResponse], error) {
			return api.MultiStream(ctx)
		},
		Unary: func(ctx context.Context, req *pb.MultiRequest) (*pb.MultiResponse, error) {
			return api.Multi(ctx, req)
		},
		SetID: func(req *pb.MultiRequest, id uint64) { req.Id = id },
		ID:    func(resp *pb.MultiResponse) uint64 { return resp.GetId() },
	}
	if invalidated != nil {
		ends.Pushed = func(r *pb.MultiResponse) {
			if len(r.GetInvalidated()) > 0 || r.GetInvalidateAll() {
				invalidated(r.GetInvalidated(), r.GetInvalidateAll())
			}
		}
		ends.Broken = func() { invalidated(nil, true) }
	}
	return &MultiStream{s: NewStream(ends)}
}

// Do sends calls as one batch and waits for its answer or ctx.
func (m *MultiStream) Do(ctx context.Context, calls []*pb.Call) ([]*pb.CallResult, error) {
	resp, err := m.s.Do(ctx, &pb.MultiRequest{Calls: calls})
	return resp.GetResults(), err
}

// Close ends the open stream and waits for its reader.
func (m *MultiStream) Close() { m.s.Close() }
