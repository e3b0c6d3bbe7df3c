package owner

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// The cluster's sentinel errors. They live here, with no wire attached, so
// that callers match them without importing gRPC; package rpc carries them
// across the wire as codes and gives them back on the other side.
var (
	// ErrUnavailable: the owner (or another node a call needed) could not
	// be reached, or a key is moving between owners. A caller may retry.
	ErrUnavailable = errors.New("ringlimit: unavailable")
	// ErrShuttingDown: the node is draining or closed. It is reported
	// wrapped in ErrUnavailable when it crossed the wire.
	ErrShuttingDown = errors.New("ringlimit: node is shutting down")
)

// Peers is how the core reaches other nodes. The core names nodes by
// their ring names; an implementation finds their addresses (package
// rpc/peer speaks gRPC; package sim delivers in memory).
//
// A call returns an error when the node could not be asked or did not
// answer (it wraps ErrUnavailable, ErrShuttingDown or the context's
// error); a node's answer is the returned value. Implementations are safe
// for concurrent use; slices passed in are not kept after a call returns,
// and slices returned belong to the caller.
type Peers interface {
	// Forward asks node to decide call. Calls to one node may be carried
	// together (batched); a Direct call goes on its own. A verdict that
	// arrives after ctx is done is given to the late-verdict handler the
	// implementation was built with, which gives its uses back.
	Forward(ctx context.Context, node string, call Call) (Result, error)
	// ForwardMany asks node to decide independent calls (none Direct),
	// carried together: results[i] answers calls[i], its Err set when the
	// call could not be asked or answered (wrapping ErrUnavailable,
	// ErrShuttingDown or the context's error, as Forward's error does).
	ForwardMany(ctx context.Context, node string, calls []Call) []Result
	// Fetch asks node for the state of counters (a new owner's first use).
	Fetch(ctx context.Context, node string, req FetchRequest) (FetchAnswer, error)
	// HandOff moves counter states to node, their new owner.
	HandOff(ctx context.Context, node string, b StateBatch) (StateAck, error)
	// Replicate ships an owner's counter states to node, a successor.
	Replicate(ctx context.Context, node string, b StateBatch) (StateAck, error)
	// Release gives back uses node recorded; elapsed is the time since
	// the receipts' verdict on the caller's clock.
	Release(ctx context.Context, node string, rs []Receipt, elapsed time.Duration) error
	// Invalidate tells node that uses of keys were given back: it drops
	// refusals of them it cached.
	Invalidate(ctx context.Context, node string, keys []string) error
	// Reset asks node to forget counters (see Router.Reset): it applies
	// the reset when it counts the keys, or passes it on.
	Reset(ctx context.Context, node string, req ResetRequest) error
	// Rejoined tells the implementation that node (re)joined the ring:
	// a node restarted at the same address must not wait out the
	// backoffs its exit left behind.
	Rejoined(node string)
}

// Call is one batch a node asks another to decide: all of its entries
// pass or none does.
type Call struct {
	Entries []limiter.Entry
	// Peek answers without recording.
	Peek bool
	// Hops is how many forwards the call has taken, this one included (0
	// reads as 1). See Hop.
	Hops uint32
	// Final: the call is counted where it lands.
	Final bool
	// Timeout is how long the caller still waits (0: no deadline of its
	// own): a node does not count a call whose caller has given up.
	Timeout time.Duration
	// Direct sends the call in a request of its own, never queued behind
	// one in flight (hops: queueing could wait in a cycle). Not sent.
	Direct bool
	// NoReceipts: the caller will not give the uses back, so a Result in
	// time need not carry their receipts (reading them is a forward's
	// largest cost on the asking node). A verdict that arrives too late
	// still gives its receipts to the late-verdict handler. Not sent.
	NoReceipts bool
}

// Result is a node's answer to one Call.
type Result struct {
	Verdict limiter.Verdict
	// Receipts of the uses recorded (allowed consumes), each naming the
	// node that recorded it.
	Receipts []Receipt
	// At is when the answer arrived, on the asking node's clock: receipt
	// ages count from it. Set by the Peers implementation.
	At time.Time
	// Err is the deciding node's error for this call (bad input, ...).
	Err error
}

// Receipt identifies one recorded use so it can be given back exactly.
// Its times are ages at the moment of the verdict, so it means the same
// on any node.
type Receipt struct {
	Key   string
	Limit limiter.Limit
	Cost  int64
	ID    uint64
	// AgeUs: how long before the verdict the use was recorded.
	AgeUs int64
	// StartAgeUs: sliding window, how long before the verdict its window
	// started.
	StartAgeUs int64
	// AfterAheadUs: token bucket, how far after the verdict the arrival
	// time it left lies; fixed window, how far after the verdict its
	// window ends.
	AfterAheadUs int64
	// Node recorded the use; AtUs is its clock at the verdict (µs): a
	// release that reaches that same node is exact.
	Node string
	AtUs int64
	// MoveInc and Moved: token bucket, the receipt's stamp of the
	// bucket's moves record (limiter.Receipt): a release subtracts the
	// moves since, so it gives back only this call's own tokens. Not
	// times: they cross clocks unchanged.
	MoveInc uint64
	Moved   int64
}

// CounterID names one counter: a key's state for one algorithm and window.
type CounterID struct {
	Key       string
	Algorithm limiter.Algorithm
	Window    time.Duration
}

// FetchRequest asks for counters' state.
type FetchRequest struct {
	Counters []CounterID
	// From is the asking node, the counters' new owner: the answering
	// node gives the counters up and passes later calls on to it.
	From string
	// FromAddr is the asker's address (the answering node may not know it
	// yet). Opaque to the core.
	FromAddr string
	// FailFast: do not wait for the node's connection to come up (it may
	// have left for good).
	FailFast bool
	// NoClaim asks for a copy only: the answering node gives nothing up
	// (it holds replicas of the counters, not their counts), but still
	// answers "held" for keys it counts itself.
	NoClaim bool
}

// FetchAnswer is a node's answer to a FetchRequest.
type FetchAnswer struct {
	States []limiter.CounterState
	// Held are the keys the node did not give up, and who counts them.
	Held []Held
}

// Held says that Holder counts Key (see Router.Fetch).
type Held struct {
	Key    string
	Holder string
}

// StateBatch carries counter states: a hand-off or a replication.
type StateBatch struct {
	From        string
	States      []limiter.CounterState
	RingVersion uint64
	// Final: the last batch of the sender's hand-off for RingVersion.
	Final bool
}

// StateAck answers a StateBatch.
type StateAck struct {
	// MergesDeltas: the receiver adds sliding-log deltas to its replicas.
	MergesDeltas bool
	// Missing are delta states whose counter the receiver did not hold:
	// the sender sends them whole next.
	Missing []CounterID
}

// ReceiptsFromEngine turns receipts node's engine recorded, on its clock
// reading now (µs), into ages that mean the same on any node.
func ReceiptsFromEngine(rs []limiter.Receipt, node string, now int64) []Receipt {
	out := make([]Receipt, len(rs))
	for i, r := range rs {
		out[i] = Receipt{
			Key: r.Key, Limit: r.Limit, Cost: r.Cost, ID: r.ID,
			AgeUs: now - r.At, StartAgeUs: now - r.Start, AfterAheadUs: r.After - now,
			Node: node, AtUs: now, MoveInc: r.MoveInc, Moved: r.Moved,
		}
	}
	return out
}

// ReceiptsToEngine turns receipts back into engine receipts on the clock
// of node self reading now (µs). Receipts self recorded come back exactly,
// by its own clock; others by their ages plus elapsed µs (the time since
// they were received, so the transit time is the only error).
func ReceiptsToEngine(rs []Receipt, self string, now, elapsed int64) []limiter.Receipt {
	out := make([]limiter.Receipt, len(rs))
	for i, r := range rs {
		base := now - elapsed
		if r.Node == self && r.AtUs != 0 {
			base = r.AtUs
		}
		out[i] = limiter.Receipt{
			Key: r.Key, Limit: r.Limit, Cost: r.Cost, ID: r.ID,
			At: base - r.AgeUs, Start: base - r.StartAgeUs, After: base + r.AfterAheadUs,
			MoveInc: r.MoveInc, Moved: r.Moved,
		}
	}
	return out
}
