package rpc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// node is a Batcher's far end under the test's control: each RPC waits
// until the test lets it answer, and every give-back is recorded.
type node struct {
	rpcs     chan []*pb.Call // each RPC's calls, as it starts
	answer   chan struct{}   // one send lets one RPC answer
	mu       sync.Mutex
	released []*pb.Receipt
}

func newNode() *node {
	return &node{rpcs: make(chan []*pb.Call, 16), answer: make(chan struct{})}
}

// send answers every call allowed, with one receipt named by its key.
func (n *node) send(ctx context.Context, calls []*pb.Call) ([]*pb.CallResult, error) {
	n.rpcs <- calls
	select {
	case <-n.answer:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]*pb.CallResult, len(calls))
	for i, c := range calls {
		out[i] = &pb.CallResult{Verdict: &pb.Verdict{Allowed: true}, Receipts: []*pb.Receipt{{Key: c.GetEntries()[0].GetKey()}}}
	}
	return out, nil
}

func (n *node) release(_ context.Context, rs []*pb.Receipt, _ time.Duration) error {
	n.mu.Lock()
	n.released = append(n.released, rs...)
	n.mu.Unlock()
	return nil
}

func call(key string) *pb.Call {
	return &pb.Call{Entries: []*pb.Entry{{Key: []byte(key), Limit: &pb.Limit{Uses: 1, WindowMs: 1000}}}}
}

type outcome struct {
	res rpc.Result
	err error
}

func sendBy(b *rpc.Batcher, d time.Duration, key string) chan outcome {
	out := make(chan outcome, 1)
	go func() {
		res, err := b.SendBy(context.Background(), time.Now().Add(d), call(key))
		out <- outcome{res, err}
	}()
	return out
}

// wait fails the test if o gives nothing in 10 s (a call that never
// returns would otherwise hang the test).
func wait(t *testing.T, o chan outcome, what string) outcome {
	t.Helper()
	select {
	case r := <-o:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer after 10 s", what)
		return outcome{}
	}
}

// A call queued behind a slow RPC, and one whose own RPC is slow, are
// both answered at their deadline while the RPCs are still out (no timer
// of their own: the batcher's watch); the verdict that comes late for the
// second is given back, and the call beside it gets its answer.
func TestBatcherDeadlineWatch(t *testing.T) {
	n := newNode()
	b := rpc.NewBatcher("n", n.send, n.release, rpc.BatcherOptions{Timeout: time.Minute})
	defer b.Close()

	lead := sendBy(b, time.Minute, "lead")
	<-n.rpcs // the leader's RPC is out, and waits
	queued := sendBy(b, 20*time.Millisecond, "queued")
	if r := wait(t, queued, "queued call"); !errors.Is(r.err, rpc.ErrUnavailable) || !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("queued call past its deadline: %+v, %v; want an unavailable, deadline-exceeded error", r.res, r.err)
	}

	late := sendBy(b, 200*time.Millisecond, "late")
	patient := sendBy(b, time.Minute, "patient")
	for b.Queued() < 2 {
		time.Sleep(time.Millisecond)
	}
	n.answer <- struct{}{} // the leader's RPC answers; the next carries the queue
	if r := wait(t, lead, "leader"); r.err != nil || !r.res.Verdict.Allowed {
		t.Fatalf("leader: %+v, %v", r.res, r.err)
	}
	calls := <-n.rpcs
	if len(calls) != 2 {
		t.Fatalf("second RPC carried %d calls, want 2 (late and patient; the expired one is not sent)", len(calls))
	}
	if r := wait(t, late, "late call"); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("call in flight past its deadline: %+v, %v; want deadline exceeded", r.res, r.err)
	}
	n.answer <- struct{}{}
	if r := wait(t, patient, "patient call"); r.err != nil || !r.res.Verdict.Allowed {
		t.Fatalf("patient call: %+v, %v", r.res, r.err)
	}
	b.Close() // waits for the RPC and its give-back
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.released) != 1 || string(n.released[0].GetKey()) != "late" {
		t.Fatalf("given back: %v; want the late call's receipt only", n.released)
	}
}

// A caller that cancels stops waiting at once; its verdict, arriving
// after, is given back.
func TestBatcherCancelledCaller(t *testing.T) {
	n := newNode()
	b := rpc.NewBatcher("n", n.send, n.release, rpc.BatcherOptions{Timeout: time.Minute})
	defer b.Close()
	lead := sendBy(b, time.Minute, "lead")
	<-n.rpcs
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan outcome, 1)
	go func() {
		res, err := b.SendBy(ctx, time.Now().Add(time.Minute), call("gone"))
		out <- outcome{res, err}
	}()
	for b.Queued() < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if r := wait(t, out, "cancelled call"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled call: %+v, %v; want canceled", r.res, r.err)
	}
	n.answer <- struct{}{}
	wait(t, lead, "leader")
	<-n.rpcs
	n.answer <- struct{}{}
	b.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.released) != 1 || string(n.released[0].GetKey()) != "gone" {
		t.Fatalf("given back: %v; want the cancelled call's receipt", n.released)
	}
}
