package peer_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/rpc/peer"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// logState is a sliding log of n calls, the newest 1 ms ago.
func logState(key string, n int, delta bool) limiter.CounterState {
	c := limiter.CounterState{Key: key, Algorithm: limiter.SlidingLog, Window: time.Minute, Delta: delta}
	for i := range n {
		c.Log = append(c.Log, limiter.LogUse{At: -int64(1000 * (n - i)), Cost: 1, ID: uint64(i + 1)})
	}
	return c
}

// replicaUses is how many calls b holds in its replica of key's log.
func replicaUses(b *node, key string) int {
	for _, c := range b.router.Replicas().Export(func(k string) bool { return k == key }, false) {
		if c.Algorithm == limiter.SlidingLog {
			return len(c.Log)
		}
	}
	return -1
}

func replicate(t testing.TB, a *node, to string, states ...limiter.CounterState) owner.StateAck {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ack, err := a.client.Replicate(ctx, to, owner.StateBatch{From: "a", States: states})
	if err != nil {
		t.Fatalf("Replicate: %v", err)
	}
	return ack
}

// recvSpy records, for every StateRequest a server reads off a stream or
// a unary call, whether it carried packed logs.
type recvSpy struct {
	mu             sync.Mutex
	packed, plain  int
	streams, unary int
}

func (s *recvSpy) note(req any) {
	if r, ok := req.(*pb.StateRequest); ok {
		s.mu.Lock()
		if r.GetPackedLogs() != nil {
			s.packed++
		} else {
			s.plain++
		}
		s.mu.Unlock()
	}
}

func (s *recvSpy) get() (packed, plain, streams, unary int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.packed, s.plain, s.streams, s.unary
}

type spyStream struct {
	grpc.ServerStream
	spy *recvSpy
}

func (s spyStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.spy.note(m)
	}
	return err
}

func (s *recvSpy) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if info.FullMethod == pb.Peer_Replicate_FullMethodName {
				s.mu.Lock()
				s.unary++
				s.mu.Unlock()
				s.note(req)
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if info.FullMethod == pb.Peer_ReplicateStream_FullMethodName {
				s.mu.Lock()
				s.streams++
				s.mu.Unlock()
				ss = spyStream{ss, s}
			}
			return h(srv, ss)
		}),
	}
}

// Replicates to a peer travel over one ReplicateStream; once the peer has
// said it reads packed logs they are packed, and the replicas hold every
// call either way.
func TestReplicatesTravelOverOneStreamPacked(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	var spy recvSpy
	restart(t, b, peer.NewServer(b.router, b.client), spy.options()...)
	a.client.Rejoined("b")
	for i := range 10 {
		replicate(t, a, "b", logState("r"+strconv.Itoa(i), i+1, false))
	}
	for i := range 10 {
		if got := replicaUses(b, "r"+strconv.Itoa(i)); got != i+1 {
			t.Errorf("b's replica of r%d holds %d calls, want %d", i, got, i+1)
		}
	}
	packed, plain, streams, unary := spy.get()
	if streams != 1 || unary != 0 {
		t.Errorf("%d ReplicateStreams and %d unary Replicates for 10 shipments, want 1 and 0", streams, unary)
	}
	if plain != 1 || packed != 9 {
		t.Errorf("%d unpacked and %d packed shipments, want 1 (before b said it reads them) and 9", plain, packed)
	}
}

// Shipments sent at once on the stream each get their own answer: b
// misses exactly the delta counter each one sent.
func TestReplicateStreamAnswersByID(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a := ns["a"]
	replicate(t, a, "b", logState("warm", 1, false)) // opens the stream
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			key := "d" + strconv.Itoa(i)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			ack, err := a.client.Replicate(ctx, "b", owner.StateBatch{From: "a", States: []limiter.CounterState{logState(key, 2, true)}})
			switch {
			case err != nil:
				errs <- err
			case len(ack.Missing) != 1 || ack.Missing[0].Key != key:
				errs <- errors.New("shipment of " + key + " answered with missing " + strconv.Quote(func() string {
					if len(ack.Missing) == 0 {
						return ""
					}
					return ack.Missing[0].Key
				}()))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// reversed answers a ReplicateStream's requests two at a time, the
// second first, each with the key of the request's first state as its
// missing counter: the client must match answers to requests by id.
type reversed struct{ pb.UnimplementedPeerServer }

func (reversed) ReplicateStream(st pb.Peer_ReplicateStreamServer) error {
	var held *pb.StateRequest
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if held == nil {
			held = req
			continue
		}
		for _, r := range []*pb.StateRequest{req, held} {
			s := r.GetStates()[0]
			if err := st.Send(&pb.StateResponse{Id: r.GetId(), Missing: []*pb.FetchRequest_Counter{{Key: s.GetKey(), Algorithm: s.GetAlgorithm(), WindowMs: s.GetWindowMs()}}}); err != nil {
				return nil
			}
		}
		held = nil
	}
}

func TestReplicateStreamAnswersOutOfOrder(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	restart(t, b, reversed{})
	a.client.Rejoined("b")
	got := make([]string, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			ack, err := a.client.Replicate(ctx, "b", owner.StateBatch{From: "a", States: []limiter.CounterState{logState("o"+strconv.Itoa(i), 1, true)}})
			if err != nil || len(ack.Missing) != 1 {
				t.Errorf("shipment %d: %+v %v", i, ack, err)
				return
			}
			got[i] = ack.Missing[0].Key
		})
	}
	wg.Wait()
	if got[0] != "o0" || got[1] != "o1" {
		t.Fatalf("answers %q, want [o0 o1]: each shipment's own", got)
	}
}

// oldNode is the peer API of a node from before ReplicateStream and
// packed logs: it answers the stream UNIMPLEMENTED, ignores packed_logs
// (an unknown field to it) and never says packs_logs.
type oldNode struct{ *peer.Server }

func (oldNode) ReplicateStream(pb.Peer_ReplicateStreamServer) error {
	return status.Error(codes.Unimplemented, "method ReplicateStream not implemented")
}

func (o oldNode) Replicate(ctx context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	req.PackedLogs = nil
	resp, err := o.Server.Replicate(ctx, req)
	if resp != nil {
		resp.PacksLogs = false
	}
	return resp, err
}

// A peer of an older version gets every shipment as a unary Replicate,
// unpacked, and holds every call.
func TestReplicateFallsBackToUnaryUnpacked(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	var spy recvSpy
	restart(t, b, oldNode{peer.NewServer(b.router, b.client)}, spy.options()...)
	a.client.Rejoined("b")
	for i := range 5 {
		replicate(t, a, "b", logState("u"+strconv.Itoa(i), 3, false))
	}
	for i := range 5 {
		if got := replicaUses(b, "u"+strconv.Itoa(i)); got != 3 {
			t.Errorf("b's replica of u%d holds %d calls, want 3", i, got)
		}
	}
	if packed, plain, _, unary := spy.get(); packed != 0 || plain != 5 || unary != 5 {
		t.Errorf("%d packed, %d unpacked, %d unary shipments; want 0, 5, 5", packed, plain, unary)
	}
}

// After the stream breaks (b restarts at the same address, as an older
// version, with no rejoin seen yet) shipments go on, over a new stream or
// unary, and b is never sent packed logs it would misread.
func TestReplicateAfterTheStreamBreaks(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run("old="+strconv.FormatBool(old), func(t *testing.T) {
			ns := startNodes(t, "a", "b")
			a, b := ns["a"], ns["b"]
			replicate(t, a, "b", logState("x", 1, false))
			replicate(t, a, "b", logState("y", 1, false)) // packed by now
			var spy recvSpy
			var srv pb.PeerServer = peer.NewServer(b.router, b.client)
			if old {
				srv = oldNode{srv.(*peer.Server)}
			}
			restart(t, b, srv, spy.options()...)
			deadline := time.Now().Add(10 * time.Second)
			for {
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				_, err := a.client.Replicate(ctx, "b", owner.StateBatch{From: "a", States: []limiter.CounterState{logState("z", 4, false)}})
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no shipment reached the restarted b: %v", err)
				}
			}
			if got := replicaUses(b, "z"); got != 4 {
				t.Errorf("b's replica of z holds %d calls, want 4", got)
			}
			packed, _, streams, unary := spy.get()
			if old && (packed != 0 || unary == 0) {
				t.Errorf("the old b got %d packed shipments and %d unary ones; want none packed", packed, unary)
			}
			if !old && (streams != 1 || unary != 0) {
				t.Errorf("%d new streams and %d unary Replicates after the break, want 1 and 0", streams, unary)
			}
		})
	}
}

// A shipment the receiver refuses is answered on the stream with an error
// naming the field; the stream goes on.
func TestReplicateStreamRefusalNamesField(t *testing.T) {
	ns := startNodes(t, "a")
	conn, err := grpc.NewClient(ns["a"].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := pb.NewPeerClient(conn).ReplicateStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := []*pb.CounterState{{Key: []byte("k"), Algorithm: pb.Algorithm(limiter.SlidingLog), WindowMs: 1000}}
	bad := &pb.StateRequest{Id: 7, From: "x", States: states, PackedLogs: &pb.PackedLogs{Counts: []uint32{2}, AgesUs: []int64{1}, Costs: []int64{1}, Ids: []uint64{1}}}
	good := &pb.StateRequest{Id: 8, From: "x", States: states, PackedLogs: &pb.PackedLogs{Counts: []uint32{1}, AgesUs: []int64{1}, Costs: []int64{1}, Ids: []uint64{1}}}
	for _, req := range []*pb.StateRequest{bad, good} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	r1, err := st.Recv()
	if err != nil || r1.GetId() != 7 || r1.GetError().GetField() != "packed_logs.ages_us" || codes.Code(r1.GetError().GetCode()) != codes.InvalidArgument {
		t.Fatalf("the bad request's answer: %v %v; want id 7, InvalidArgument naming packed_logs.ages_us", r1, err)
	}
	r2, err := st.Recv()
	if err != nil || r2.GetId() != 8 || r2.GetError() != nil || !r2.GetPacksLogs() {
		t.Fatalf("the good request's answer: %v %v; want id 8, no error, packs_logs", r2, err)
	}
	_ = st.CloseSend()
}

// BenchmarkReplicate ships a batch as an owner under load does (every
// counter a delta of a call or two, some whole) to a real peer on
// 127.0.0.1, both ends in this process: over the stream with packed logs,
// and as unary unpacked Replicates to a node of the older version. Only
// the ratio of the two, from one run, means anything.
func BenchmarkReplicate(b *testing.B) {
	// A 20 ms window keeps the replicas' logs as short as an owner's
	// deltas leave them (a call or two per shipment, expiring).
	batch := make([]limiter.CounterState, 512)
	for i := range batch {
		batch[i] = logState("bench-"+strconv.Itoa(i), 1+i%2, i%8 != 0)
		batch[i].Window = 20 * time.Millisecond
	}
	for _, old := range []bool{false, true} {
		name := "stream-packed"
		if old {
			name = "unary-unpacked"
		}
		b.Run(name, func(b *testing.B) {
			ns := startNodes(b, "a", "b")
			a, bn := ns["a"], ns["b"]
			if old {
				restart(b, bn, oldNode{peer.NewServer(bn.router, bn.client)})
				a.client.Rejoined("b")
			}
			// Whole first, so that the deltas find their counters.
			whole := make([]limiter.CounterState, len(batch))
			for i := range batch {
				whole[i] = batch[i]
				whole[i].Delta = false
			}
			replicate(b, a, "b", whole...)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for b.Loop() {
				replicate(b, a, "b", batch...)
			}
			// The process's CPU time, both ends: on a shared machine the
			// wall time mostly measures the neighbours.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/float64(len(batch)), "cpu-ns/state")
		})
	}
}

// cpuTime is the process's user and system CPU time so far, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
