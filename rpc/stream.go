package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// The hot path goes over MultiStream: one long-lived stream per node,
// each batch a message with an id. A unary Multi pays for headers, a new
// HTTP/2 stream, a handler dispatch and trailers on every batch; on a
// stream a batch is one DATA frame each way.

// MultiStream is the client end of a node's MultiStream (the server end
// is package rpc/api): it sends one node's batches over a long-lived
// stream, opened on first use and again after it breaks. A node without MultiStream (an older
// version) answers UNIMPLEMENTED; from then on the batches go as unary
// Multi calls.
type MultiStream struct {
	api   pb.LimiterClient
	unary atomic.Bool
	// invalidated, when set, gets the keys a node pushed (uses of them
	// were given back), or all=true when every cached refusal must go: the
	// node said so, or a stream ended and pushes may have been lost.
	invalidated func(keys [][]byte, all bool)

	mu     sync.Mutex
	cur    *openStream
	closed bool
	wg     sync.WaitGroup // the streams' readers
}

// openStream is one MultiStream and the batches waiting for its answers.
type openStream struct {
	st     pb.Limiter_MultiStreamClient
	cancel context.CancelFunc
	sendMu sync.Mutex // gRPC allows one SendMsg at a time

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan *pb.MultiResponse
	err     error // why the stream ended; set once
}

// Do sends calls as one batch and waits for its answer or ctx.
func (m *MultiStream) Do(ctx context.Context, calls []*pb.Call) ([]*pb.CallResult, error) {
	if m.unary.Load() {
		return m.multi(ctx, calls)
	}
	os, err := m.stream()
	if err != nil {
		return nil, err
	}
	ch := make(chan *pb.MultiResponse, 1)
	id, err := os.register(ch)
	if err != nil {
		return nil, err
	}
	// A failed Send means the stream is broken: its reader learns why
	// from Recv and closes ch, so the error itself is not needed here.
	os.sendMu.Lock()
	_ = os.st.Send(&pb.MultiRequest{Id: id, Calls: calls})
	os.sendMu.Unlock()
	select {
	case r, ok := <-ch:
		if ok {
			return r.GetResults(), nil
		}
		err := os.failure()
		if status.Code(err) == codes.Unimplemented {
			m.unary.Store(true)
			return m.multi(ctx, calls)
		}
		return nil, err
	case <-ctx.Done():
		os.forget(id)
		return nil, ctx.Err()
	}
}

func (m *MultiStream) multi(ctx context.Context, calls []*pb.Call) ([]*pb.CallResult, error) {
	resp, err := m.api.Multi(ctx, &pb.MultiRequest{Calls: calls})
	return resp.GetResults(), err
}

// stream returns the open stream, opening one if there is none.
func (m *MultiStream) stream() (*openStream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrShuttingDown
	}
	if m.cur != nil {
		return m.cur, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := m.api.MultiStream(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	os := &openStream{st: st, cancel: cancel, waiting: map[uint64]chan *pb.MultiResponse{}}
	m.cur = os
	m.wg.Add(1)
	go m.read(os)
	return os, nil
}

// read delivers the stream's answers until it ends, then fails the
// batches still waiting and lets the next batch open a new stream.
func (m *MultiStream) read(os *openStream) {
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
			if m.invalidated != nil {
				m.invalidated(nil, true)
			}
			return
		}
		if m.invalidated != nil && (len(r.GetInvalidated()) > 0 || r.GetInvalidateAll()) {
			m.invalidated(r.GetInvalidated(), r.GetInvalidateAll())
		}
		if r.GetId() == 0 {
			continue // a push, answering no request
		}
		os.mu.Lock()
		ch, ok := os.waiting[r.GetId()]
		delete(os.waiting, r.GetId())
		os.mu.Unlock()
		if ok {
			ch <- r
		}
	}
}

func (os *openStream) register(ch chan *pb.MultiResponse) (uint64, error) {
	os.mu.Lock()
	defer os.mu.Unlock()
	if os.err != nil {
		return 0, os.err
	}
	os.next++
	os.waiting[os.next] = ch
	return os.next, nil
}

func (os *openStream) forget(id uint64) {
	os.mu.Lock()
	delete(os.waiting, id)
	os.mu.Unlock()
}

func (os *openStream) fail(err error) {
	os.mu.Lock()
	defer os.mu.Unlock()
	if os.err == nil {
		os.err = err
	}
	for id, ch := range os.waiting {
		close(ch)
		delete(os.waiting, id)
	}
}

func (os *openStream) failure() error {
	os.mu.Lock()
	defer os.mu.Unlock()
	if os.err == nil {
		return fmt.Errorf("%w: stream ended", ErrUnavailable)
	}
	return os.err
}

// close ends the open stream and waits for its reader.
func (m *MultiStream) Close() {
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

// NewMultiStream returns the stream end for a node's Limiter client.
// invalidated, when set, gets the keys the node pushes (uses of them were
// given back), or all=true when every cached refusal must go.
func NewMultiStream(api pb.LimiterClient, invalidated func(keys [][]byte, all bool)) *MultiStream {
	return &MultiStream{api: api, invalidated: invalidated}
}
