package peer

import (
	"errors"
	"io"
	"sync"

	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// ReplicateStream is Replicate over one long-lived stream: a unary
// Replicate pays for headers, a new HTTP/2 stream, a handler dispatch and
// trailers on every shipment, and an owner ships to each successor every
// few milliseconds under load. Storing a replica never waits (the core
// only writes its store), so requests are served in the order they
// arrive, by the stream's reader, with no goroutine per request; each is
// answered under its id, a refusal in its answer's error (the stream
// goes on).
func (s *Server) ReplicateStream(st pb.Peer_ReplicateStreamServer) error {
	rs := &replicateStream{}
	// The loop reads in a goroutine of its own, so that the handler can
	// end the stream at shutdown while it waits in Recv (returning cancels
	// the stream, and Recv then fails).
	recvd := make(chan error, 1)
	go func() { recvd <- rs.loop(s, st) }()
	select {
	case err := <-recvd:
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	case <-s.streams.ctx.Done():
		// Let the shipment being stored finish and be answered, then end
		// the stream: the peer's next shipment opens a new one, which a
		// stopping server refuses.
		rs.mu.Lock()
		rs.ending = true
		rs.mu.Unlock()
		return nil
	}
}

// replicateStream is one peer's ReplicateStream on this node.
type replicateStream struct {
	// mu is held while a request is stored and answered, so that the
	// handler's return at shutdown waits for it.
	mu     sync.Mutex
	ending bool
}

func (rs *replicateStream) loop(s *Server, st pb.Peer_ReplicateStreamServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return err
		}
		rs.mu.Lock()
		if rs.ending {
			// Not stored, not answered: the peer learns it when the
			// stream ends, and sends those counters whole next time.
			rs.mu.Unlock()
			return nil
		}
		resp, err := s.replicate(req)
		if err != nil {
			resp = &pb.StateResponse{Error: rpc.ErrorToPB(err)}
		}
		resp.Id = req.GetId()
		err = st.Send(resp)
		rs.mu.Unlock()
		if err != nil {
			return err
		}
	}
}
