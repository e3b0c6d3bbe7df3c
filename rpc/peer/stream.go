package peer

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// maxStreamRequests bounds the requests of one ForwardStream decided at
// once: past it the stream reads no more until one is answered, so a peer
// cannot make a node hold unbounded goroutines (HTTP/2 flow control then
// holds the sender back).
const maxStreamRequests = 256

// streamTimeout bounds a ForwardStream request whose calls carry no
// timeout of their own, as ForwardTimeout bounds a forward.
const streamTimeout = time.Second

// streamWorkers is how many goroutines each ForwardStream keeps for its
// requests: a fresh goroutine per request would grow its stack through
// the router's call chain every time (the reason gRPC's server runs
// stream workers). More requests at once spawn goroutines.
const streamWorkers = 4

// streams ends the peers' long-lived ForwardStreams when the node shuts
// down: one would otherwise hold the gRPC server's graceful stop until the
// peer closed it.
type streams struct {
	ctx context.Context
	end context.CancelFunc
}

func newStreams() *streams {
	ctx, cancel := context.WithCancel(context.Background())
	return &streams{ctx: ctx, end: cancel}
}

// EndStreams ends the peers' ForwardStreams once the requests they carry
// are answered. The node calls it before stopping its gRPC server.
func (s *Server) EndStreams() { s.streams.end() }

// ForwardStream is Forward over one long-lived stream: each request is
// decided on its own (a hop may wait for a hand-off while the next request
// is counted) and answered under its id as soon as it is decided.
func (s *Server) ForwardStream(st pb.Peer_ForwardStreamServer) error {
	fs := &forwardStream{s: s, st: st, sem: make(chan struct{}, maxStreamRequests), work: make(chan *pb.ForwardRequest), quit: make(chan struct{})}
	fs.idle = sync.NewCond(&fs.mu)
	for range streamWorkers {
		go fs.worker()
	}
	defer close(fs.quit)
	// The loop reads and dispatches in a goroutine of its own, so that
	// the handler can end the stream at shutdown while it waits in Recv
	// (returning cancels the stream, and Recv then fails).
	recvd := make(chan error, 1)
	go func() { recvd <- fs.loop() }()
	select {
	case err := <-recvd:
		fs.end()
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	case <-s.streams.ctx.Done():
		// Answer what was taken in, then end the stream: the peer's next
		// request opens a new one, which a stopping server refuses.
		fs.end()
		return nil
	}
}

// forwardStream is one peer's ForwardStream on this node.
type forwardStream struct {
	s    *Server
	st   pb.Peer_ForwardStreamServer
	sem  chan struct{} // a slot per request being decided
	work chan *pb.ForwardRequest
	quit chan struct{} // closed when the handler returns: workers stop

	sendMu  sync.Mutex // gRPC allows one SendMsg at a time
	sendErr error

	mu     sync.Mutex
	n      int  // requests being decided
	ending bool // the handler is returning: take no more requests
	idle   *sync.Cond
}

// loop reads requests and hands each to a worker (or a goroutine of its
// own when every worker is busy) until Recv fails.
func (fs *forwardStream) loop() error {
	for {
		req, err := fs.st.Recv()
		if err != nil {
			return err
		}
		fs.sem <- struct{}{}
		fs.mu.Lock()
		if fs.ending {
			// The stream is ending: the peer learns that this request
			// was not answered when the stream ends, so nothing counted
			// it.
			fs.mu.Unlock()
			<-fs.sem
			continue
		}
		fs.n++
		fs.mu.Unlock()
		select {
		case fs.work <- req:
		default:
			go fs.answer(req)
		}
	}
}

func (fs *forwardStream) worker() {
	for {
		select {
		case req := <-fs.work:
			fs.answer(req)
		case <-fs.quit:
			return
		}
	}
}

// end waits for the requests being decided and stops taking new ones.
func (fs *forwardStream) end() {
	fs.mu.Lock()
	fs.ending = true
	for fs.n > 0 {
		fs.idle.Wait()
	}
	fs.mu.Unlock()
}

// answer decides one request and sends its answer under its id.
func (fs *forwardStream) answer(req *pb.ForwardRequest) {
	defer func() {
		<-fs.sem
		fs.mu.Lock()
		if fs.n--; fs.n == 0 {
			fs.idle.Broadcast()
		}
		fs.mu.Unlock()
	}()
	var longest int64
	for _, c := range req.GetCalls() {
		longest = max(longest, c.GetTimeoutUs())
	}
	timeout := streamTimeout
	if longest > 0 {
		timeout = time.Duration(longest) * time.Microsecond
	}
	ctx, cancel := context.WithTimeout(fs.st.Context(), timeout)
	resp := fs.s.forward(ctx, req)
	cancel()
	resp.Id = req.GetId()
	fs.sendMu.Lock()
	if fs.sendErr == nil {
		fs.sendErr = fs.st.Send(resp)
	}
	fs.sendMu.Unlock()
}
