package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Recalls (issue #21): a fleet client that holds leases of a node's keys
// keeps a LeaseRecalls stream open to it. Before the node refuses a key
// whose uses are out on the client's leases, it sends the leases' ids
// down the stream and waits, bounded, for their returns: the refusal then
// counts only the uses made, without waiting for the leases to end.

// ErrNoRecallStream is Recall's answer for a holder with no stream open.
var ErrNoRecallStream = errors.New("api: the holder has no recall stream open")

// recallers is the set of open recall streams, by holder.
type recallers struct {
	mu  sync.Mutex
	by  map[string]*recaller
	seq uint64
}

type recaller struct {
	// out queues recalls for the stream's sender: a client slow to read
	// never holds up a decision (a full queue fails the recall at once).
	out     chan *pb.LeaseRecall
	mu      sync.Mutex
	pending map[uint64]chan []leasehold.Return
}

func newRecallers() *recallers { return &recallers{by: map[string]*recaller{}} }

// LeaseRecalls serves a holder's recall stream until the holder ends it
// or the node's streams end.
func (s *Server) LeaseRecalls(stream pb.Limiter_LeaseRecallsServer) error {
	if _, ok := s.cfg.Node.(Leaser); !ok {
		return status.Error(codes.Unimplemented, "ringlimit: this node grants no leases")
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	holder := first.GetHolder()
	if holder == "" {
		return status.Error(codes.InvalidArgument, "ringlimit: LeaseRecalls: holder: must not be empty")
	}
	rc := &recaller{out: make(chan *pb.LeaseRecall, 64), pending: map[uint64]chan []leasehold.Return{}}
	rs := s.recalls
	rs.mu.Lock()
	prev := rs.by[holder]
	rs.by[holder] = rc
	rs.mu.Unlock()
	if prev != nil {
		prev.fail() // a newer stream of the same holder replaces it
	}
	defer func() {
		rs.mu.Lock()
		if rs.by[holder] == rc {
			delete(rs.by, holder)
		}
		rs.mu.Unlock()
		rc.fail()
	}()
	st := s.streams
	st.wg.Add(2)
	done := make(chan error, 2)
	go func() {
		defer st.wg.Done()
		for {
			select {
			case m := <-rc.out:
				if err := stream.Send(m); err != nil {
					done <- err
					return
				}
			case <-stream.Context().Done():
				return
			}
		}
	}()
	go func() {
		defer st.wg.Done()
		for {
			ans, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				done <- err
				return
			}
			rc.mu.Lock()
			ch := rc.pending[ans.GetSeq()]
			delete(rc.pending, ans.GetSeq())
			rc.mu.Unlock()
			if ch != nil {
				ch <- rpc.LeaseReturnsFromPB(ans.GetReturns())
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-st.ctx.Done():
		return status.Error(codes.Unavailable, "ringlimit: node shutting down")
	}
}

// fail ends every recall waiting on rc: they get nothing back.
func (rc *recaller) fail() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for seq, ch := range rc.pending {
		close(ch)
		delete(rc.pending, seq)
	}
}

// Recall asks holder, over its recall stream, for the leases ids back and
// waits for their returns within ctx. ErrNoRecallStream: the holder has
// no stream open here.
func (s *Server) Recall(ctx context.Context, holder string, ids []uint64) ([]leasehold.Return, error) {
	rs := s.recalls
	rs.mu.Lock()
	rc := rs.by[holder]
	rs.seq++
	seq := rs.seq
	rs.mu.Unlock()
	if rc == nil {
		return nil, ErrNoRecallStream
	}
	ch := make(chan []leasehold.Return, 1)
	rc.mu.Lock()
	rc.pending[seq] = ch
	rc.mu.Unlock()
	forget := func() {
		rc.mu.Lock()
		delete(rc.pending, seq)
		rc.mu.Unlock()
	}
	select {
	case rc.out <- &pb.LeaseRecall{Seq: seq, Ids: ids}:
	default:
		forget()
		return nil, fmt.Errorf("%w: its recall queue is full", ErrNoRecallStream)
	}
	select {
	case rets, ok := <-ch:
		if !ok {
			return nil, ErrNoRecallStream
		}
		return rets, nil
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	}
}
