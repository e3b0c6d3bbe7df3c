package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/ringlimit/ringlimit/limiter"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Result is a batched call's answer.
type Result struct {
	Verdict  limiter.Verdict
	Receipts []*pb.Receipt
	At       time.Time // when the verdict arrived (receipt ages count from it)
	Err      error     // the node's error for this call (bad input...)
}

// pending is one call waiting in a forwarder's queue.
type pending struct {
	call     *pb.Call
	deadline time.Time
	done     chan struct{} // closed once: answered, failed, or timed out
	res      Result
	err      error
	mu       sync.Mutex
	closed   bool // done is closed (under mu)
	// abandoned is set when the caller stopped waiting; the sender then
	// gives back whatever the owner recorded for it.
	abandoned bool
	timedOut  bool // the batcher's deadline watch answered it
}

// finish answers p unless it was answered already (the deadline watch
// was first), and reports whether its caller had stopped waiting.
func (p *pending) finish(res Result, err error) (abandoned bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.res, p.err, p.closed = res, err, true
		close(p.done)
	}
	return p.abandoned
}

// expire answers p with its deadline, unless it was answered already.
func (p *pending) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed, p.abandoned, p.timedOut = true, true, true
		close(p.done)
	}
}

// Batcher sends calls to one node with natural batching: when no RPC is
// in flight a call goes at once, in its caller's goroutine; while one is,
// calls queue, and the next RPC carries the whole queue (sent by a
// goroutine that runs while there is a queue). No timer sits on the hot
// path, and an idle node's call costs no goroutine hand-off. Each call's
// deadline travels with it (the node does not count a call whose caller
// gave up), and a verdict that arrives after its caller left is released.
// After a failed RPC, calls fail fast for a backoff that doubles from 50 ms
// to 2 s, so a dead node is not hammered.
type Batcher struct {
	name  string
	stats BatcherStats // this batcher's own, beside the shared opts.Stats
	do    func(ctx context.Context, calls []*pb.Call) ([]*pb.CallResult, error)
	rel   func(ctx context.Context, receipts []*pb.Receipt, elapsed time.Duration) error
	opts  BatcherOptions

	mu       sync.Mutex
	queue    []*pending
	inflight bool
	closed   bool
	// downUntil makes calls fail fast after a failure, for a backoff that
	// doubles on each consecutive failure (50 ms to 2 s).
	downUntil time.Time
	backoff   time.Duration
	slow      int // RPCs in a row that ran out of time
	// flight is the batch the sender has in flight (its calls' callers
	// wait, as queued ones do); watch fires at watchAt, the earliest
	// deadline of the calls waiting in queue and flight (zero: not set).
	flight  []*pending
	watch   *time.Timer
	watchAt time.Time
	wg      sync.WaitGroup
}

// BatcherOptions tune a Batcher; zero fields mean defaults.
type BatcherOptions struct {
	// Timeout is the longest a call waits for its answer (a context
	// deadline that comes sooner wins). Default 1 s.
	Timeout time.Duration
	// MaxBatch caps the calls of one RPC. Default 512.
	MaxBatch int
	// Logger receives failed releases. Default slog.Default().
	Logger *slog.Logger
	// Stats, when set, counts RPCs, calls and errors.
	Stats *BatcherStats
}

// BatcherStats counts a Batcher's work; every field only grows.
type BatcherStats struct {
	RPCs, Calls, Errors, Released atomic.Int64
}

// NewBatcher returns a batcher for the node called name. send runs one
// RPC carrying calls and returns one result per call, in order; release
// gives back receipts (ages at their verdict, plus elapsed).
func NewBatcher(name string, send func(context.Context, []*pb.Call) ([]*pb.CallResult, error),
	release func(context.Context, []*pb.Receipt, time.Duration) error, opts BatcherOptions) *Batcher {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 512
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Stats == nil {
		opts.Stats = &BatcherStats{}
	}
	return &Batcher{name: name, do: send, rel: release, opts: opts}
}

const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// Call sends one batch of entries and waits for its answer or the
// caller's deadline.
func (f *Batcher) Call(ctx context.Context, entries []limiter.Entry, peek bool) (Result, error) {
	return f.Send(ctx, &pb.Call{Entries: EntriesToPB(entries), Peek: peek})
}

// Direct sends one call in an RPC of its own, at once, never queued behind
// an RPC in flight. Calls passed on between nodes (hops) use it: queued, a
// hop could wait for an RPC in flight whose own call waits for the hop —
// a cycle broken only by the deadline.
func (f *Batcher) Direct(ctx context.Context, call *pb.Call) (Result, error) {
	p := &pending{call: call, done: make(chan struct{}), deadline: time.Now().Add(f.opts.Timeout)}
	if d, ok := ctx.Deadline(); ok && d.Before(p.deadline) {
		p.deadline = d
	}
	f.rpc([]*pending{p}) // answers p, whatever happens
	<-p.done
	return p.res, p.err
}

// Send is Call with a call already in wire form (its TimeoutUs is set
// from ctx). The Batcher owns call from here on.
//
// When no RPC to the node is in flight the call is sent in the caller's
// goroutine (it leads): it returns when its RPC ends, by the call's
// deadline at the latest, so a cancellation of ctx that is not its
// deadline is noticed only then.
func (f *Batcher) Send(ctx context.Context, call *pb.Call) (Result, error) {
	deadline := time.Now().Add(f.opts.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return f.SendBy(ctx, deadline, call)
}

// SendBy is Send with the call's deadline given (ctx's own, if any, is not
// read; its cancellation still ends the wait), so that a caller trying
// several nodes in turn within one deadline needs no context of its own
// (a timer per call).
func (f *Batcher) SendBy(ctx context.Context, deadline time.Time, call *pb.Call) (Result, error) {
	p := &pending{call: call, done: make(chan struct{}), deadline: deadline}
	lead, err := f.enqueue(p)
	if err != nil {
		return Result{}, err
	}
	if lead {
		f.rpc([]*pending{p}) // answers p, whatever happens
		f.handOn()
		<-p.done
		return p.res, p.err
	}
	return f.await(ctx, p)
}

// await waits for a queued call's answer, or for ctx.
func (f *Batcher) await(ctx context.Context, p *pending) (Result, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.mu.Lock()
		answered := p.closed && !p.timedOut
		p.abandoned = true
		p.mu.Unlock()
		if !answered {
			return Result{}, fmt.Errorf("%w: %s did not answer in time: %w", ErrUnavailable, f.name, ctx.Err())
		}
	}
	if p.timedOut {
		return Result{}, fmt.Errorf("%w: %s did not answer in time: %w", ErrUnavailable, f.name, context.DeadlineExceeded)
	}
	return p.res, p.err
}

// SendMany sends independent calls together, by deadline: in one RPC
// when none is in flight (the caller leads, as Send's does), else queued
// together for the next. It answers calls[i] into res[i] and errs[i]
// (len(calls) each), and returns when every call is answered or ctx is
// done. The Batcher owns the calls from here on.
func (f *Batcher) SendMany(ctx context.Context, deadline time.Time, calls []*pb.Call, res []Result, errs []error) {
	ps := make([]*pending, len(calls))
	for i, c := range calls {
		ps[i] = &pending{call: c, done: make(chan struct{}), deadline: deadline}
	}
	lead, err := f.enqueueMany(ps)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return
	}
	if lead {
		f.rpc(ps[:min(len(ps), f.opts.MaxBatch)]) // answers them, whatever happens
		f.handOn()                                // sends the rest (enqueueMany queued them)
		for i, p := range ps[:min(len(ps), f.opts.MaxBatch)] {
			<-p.done
			res[i], errs[i] = p.res, p.err
		}
		for i := f.opts.MaxBatch; i < len(ps); i++ {
			res[i], errs[i] = f.await(ctx, ps[i])
		}
		return
	}
	for i, p := range ps {
		res[i], errs[i] = f.await(ctx, p)
	}
}

// enqueue queues p, or reports that no RPC is in flight: then the caller
// leads, sending p alone at once (the queue is empty), and must call
// handOn after.
func (f *Batcher) enqueue(p *pending) (lead bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false, ErrShuttingDown
	}
	if now := time.Now(); now.Before(f.downUntil) {
		return false, fmt.Errorf("%w: %s failed recently; retrying in %v", ErrUnavailable, f.name, f.downUntil.Sub(now).Round(time.Millisecond))
	}
	if !f.inflight {
		f.inflight = true
		f.wg.Add(1)
		return true, nil
	}
	f.queue = append(f.queue, p)
	if f.watchAt.IsZero() || p.deadline.Before(f.watchAt) {
		f.watchAt = p.deadline
		if f.watch == nil {
			f.watch = time.AfterFunc(time.Until(p.deadline), f.expireDue)
		} else {
			f.watch.Reset(time.Until(p.deadline))
		}
	}
	return false, nil
}

// enqueueMany is enqueue for calls sent together: when no RPC is in
// flight the caller leads with the first MaxBatch of them and the rest
// are queued; otherwise all of them are.
func (f *Batcher) enqueueMany(ps []*pending) (lead bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false, ErrShuttingDown
	}
	if now := time.Now(); now.Before(f.downUntil) {
		return false, fmt.Errorf("%w: %s failed recently; retrying in %v", ErrUnavailable, f.name, f.downUntil.Sub(now).Round(time.Millisecond))
	}
	queued := ps
	if !f.inflight {
		f.inflight = true
		f.wg.Add(1)
		lead = true
		queued = ps[min(len(ps), f.opts.MaxBatch):]
	}
	if len(queued) == 0 {
		return lead, nil
	}
	f.queue = append(f.queue, queued...)
	if d := queued[0].deadline; f.watchAt.IsZero() || d.Before(f.watchAt) {
		f.watchAt = d
		if f.watch == nil {
			f.watch = time.AfterFunc(time.Until(d), f.expireDue)
		} else {
			f.watch.Reset(time.Until(d))
		}
	}
	return lead, nil
}

// expireDue answers the waiting calls whose deadline has passed, and sets
// the watch for the next deadline. With one Timeout for every call the
// deadlines come in queue order, so it fires about once a Timeout.
func (f *Batcher) expireDue() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	var next time.Time
	for _, ps := range [2][]*pending{f.queue, f.flight} {
		for _, p := range ps {
			switch {
			case !p.deadline.After(now):
				p.expire()
			case next.IsZero() || p.deadline.Before(next):
				next = p.deadline
			}
		}
	}
	f.watchAt = next
	if !next.IsZero() {
		f.watch.Reset(next.Sub(now))
	}
}

// handOn ends a leader's turn: the calls that queued during its RPC go in
// the next one, sent by a goroutine, so the leader returns at once.
func (f *Batcher) handOn() {
	f.mu.Lock()
	if len(f.queue) == 0 {
		f.inflight = false
		f.mu.Unlock()
		f.wg.Done()
		return
	}
	f.mu.Unlock()
	go f.send() // takes over the leader's wg count
}

// send runs RPCs while there is a queue, then stops: an idle peer costs
// no goroutine.
//
// Before it takes the queue for the next RPC it yields the processor once
// (runtime.Gosched, not a timer: it returns at once when nothing else is
// runnable). The callers the last RPC just answered are runnable then, and
// those that call again at once join this RPC instead of waiting a round
// trip for the one after. Under 64 closed-loop callers, a Client's batches
// over 3 nodes grew from about 9.3 to 11.5-12 calls (throughput: a median
// of +11% in paired runs) and embedded nodes' forward batches from 5.4 to
// 7.6 calls (BENCHMARKS.md).
func (f *Batcher) send() {
	defer f.wg.Done()
	for {
		runtime.Gosched()
		f.mu.Lock()
		batch := f.queue
		if len(batch) > f.opts.MaxBatch {
			batch = batch[:f.opts.MaxBatch:f.opts.MaxBatch]
			f.queue = f.queue[f.opts.MaxBatch:]
		} else {
			f.queue = nil
		}
		f.flight = batch
		if len(batch) == 0 {
			f.inflight = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		f.rpc(batch)
	}
}

func (f *Batcher) rpc(batch []*pending) {
	now := time.Now()
	calls := make([]*pb.Call, 0, len(batch))
	live := batch[:0:0]
	var deadline time.Time
	for _, p := range batch {
		left := p.deadline.Sub(now)
		if left <= 0 {
			// The caller has given up: do not make the owner count it.
			p.finish(Result{}, fmt.Errorf("%w: deadline passed before the forward was sent", context.DeadlineExceeded))
			continue
		}
		p.call.TimeoutUs = limiter.Micros(left)
		calls = append(calls, p.call)
		live = append(live, p)
		if p.deadline.After(deadline) {
			deadline = p.deadline
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	// Every caller is answered by the deadline; an answer that comes after
	// it (over a Stream) still gives back what the node counted.
	ctx = WithLate(ctx, func(resp any) { f.lateAnswer(live, resp) })
	results, err := f.do(ctx, calls)
	cancel()
	at := time.Now()
	f.opts.Stats.RPCs.Add(1)
	f.opts.Stats.Calls.Add(int64(len(live)))
	f.stats.RPCs.Add(1)
	f.stats.Calls.Add(int64(len(live)))
	if err == nil && len(results) != len(live) {
		err = fmt.Errorf("%s answered %d results for %d calls", f.name, len(results), len(live))
	}
	if err != nil {
		f.opts.Stats.Errors.Add(1)
		f.stats.Errors.Add(1)
		// Back off at once from a node that refused or broke the call, but
		// from a merely slow one (a deadline) only when it is slow twice in
		// a row: failing every call fast after one slow answer would turn
		// a moment of overload into many fallbacks.
		slow := Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded)
		if !slow || f.slowAgain() {
			f.failed()
		}
		err = fmt.Errorf("%w: %s: %w", ErrUnavailable, f.name, FromStatus(err))
		for _, p := range live {
			p.finish(Result{}, err)
		}
		return
	}
	f.succeeded()
	var late []*pb.Receipt
	for i, p := range live {
		cr := results[i]
		res := Result{Verdict: VerdictFromPB(cr.GetVerdict()), Receipts: cr.GetReceipts(), At: at, Err: ErrorFromPB(cr.GetError())}
		if p.finish(res, nil) {
			// The caller was already answered without this verdict: give
			// the uses back so it loses none for a call that did not run.
			late = appendGiveBack(late, cr, p.call)
		}
	}
	f.releaseLate(late, at)
}

// lateAnswer takes the answer to an RPC that came after its deadline, when
// every one of its callers had been answered without it (the RPC failed):
// whatever the node recorded is given back.
func (f *Batcher) lateAnswer(live []*pending, resp any) {
	r, ok := resp.(interface{ GetResults() []*pb.CallResult })
	if !ok || len(r.GetResults()) != len(live) {
		return
	}
	at := time.Now()
	var late []*pb.Receipt
	for i, cr := range r.GetResults() {
		late = appendGiveBack(late, cr, live[i].call)
	}
	f.releaseLate(late, at)
}

// appendGiveBack appends the receipts of what cr, the answer to call,
// recorded (an allowed consume), completed from call, for a give-back.
func appendGiveBack(late []*pb.Receipt, cr *pb.CallResult, call *pb.Call) []*pb.Receipt {
	if ErrorFromPB(cr.GetError()) != nil || !cr.GetVerdict().GetAllowed() || call.Peek {
		return late
	}
	CompleteReceipts(cr.GetReceipts(), call)
	return append(late, cr.GetReceipts()...)
}

// releaseLate gives back the uses of verdicts that came (at) after their
// callers were answered, so no caller loses a use for a call that did not
// run.
func (f *Batcher) releaseLate(late []*pb.Receipt, at time.Time) {
	if len(late) == 0 {
		return
	}
	f.opts.Stats.Released.Add(int64(len(late)))
	f.stats.Released.Add(int64(len(late)))
	ctx, cancel := context.WithTimeout(context.Background(), f.opts.Timeout)
	defer cancel()
	if err := f.rel(ctx, late, time.Since(at)); err != nil {
		f.opts.Logger.Warn("ringlimit: could not give back a late verdict's uses", "node", f.name, "uses", len(late), "err", err)
	}
}

func (f *Batcher) failed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.backoff == 0 {
		f.backoff = minBackoff
	} else {
		f.backoff = min(2*f.backoff, maxBackoff)
	}
	f.downUntil = time.Now().Add(f.backoff)
}

// Reset ends a backoff at once: the peer is known to be back (it has
// rejoined the ring), so calls need not fail fast until the backoff ends.
func (f *Batcher) Reset() { f.succeeded() }

func (f *Batcher) succeeded() {
	f.mu.Lock()
	f.backoff, f.downUntil, f.slow = 0, time.Time{}, 0
	f.mu.Unlock()
}

// slowAgain counts a deadline and reports whether the last RPC was one too.
func (f *Batcher) slowAgain() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slow++
	return f.slow >= 2
}

// Queued returns the number of calls waiting for the next RPC.
func (f *Batcher) Queued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue)
}

// Stats counts this batcher's own RPCs, calls, errors and releases (the
// options' Stats may be shared by several batchers).
func (f *Batcher) Stats() *BatcherStats { return &f.stats }

// Close fails queued calls and waits for the RPC in flight.
func (f *Batcher) Close() {
	f.mu.Lock()
	f.closed = true
	q := f.queue
	f.queue = nil
	f.mu.Unlock()
	for _, p := range q {
		p.finish(Result{}, ErrShuttingDown)
	}
	f.wg.Wait()
	f.mu.Lock()
	if f.watch != nil {
		f.watch.Stop()
	}
	f.mu.Unlock()
}
