package owner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// PeerServer returns the router's implementation of the peer gRPC service.
func (r *Router) PeerServer() pb.PeerServer { return peerServer{r: r} }

type peerServer struct {
	pb.UnimplementedPeerServer
	r *Router
}

// Forward decides calls a peer sent for keys this node owns. A call goes
// one hop further when this node does not count its keys (its ring is
// newer, it gave the keys to a new owner that asked, or another node kept
// them while their rings disagree), until it has taken maxHops forwards:
// then it is counted here. While this node is shutting down it counts
// nothing and relays every call to its owner, so a peer whose ring has not
// yet seen it leave still gets an owner's answer.
func (s peerServer) Forward(ctx context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	r := s.r
	if err := r.enter(); err != nil {
		return r.relay(ctx, req)
	}
	defer r.calls.Done()
	arrived := time.Now()
	r.lastServed.Store(arrived.UnixNano())
	resp := &pb.ForwardResponse{Results: make([]*pb.CallResult, len(req.GetCalls()))}
	var hops sync.WaitGroup
	// passTo sends a call one hop further, in parallel with the rest, and
	// answers with the result of the node it lands on.
	passTo := func(ctx context.Context, cancel context.CancelFunc, cr *pb.CallResult, to string, c *pb.Call) {
		hops.Go(func() {
			defer cancel()
			r.stats.Hopped.Add(1)
			began := time.Now()
			res, err := r.hopResult(ctx, to, c)
			r.slow(began, "hop to", to, string(c.GetEntries()[0].GetKey()))
			if err != nil {
				cr.Error = rpc.ErrorToPB(err)
				return
			}
			cr.Verdict, cr.Receipts, cr.Error = res.GetVerdict(), res.GetReceipts(), res.GetError()
		})
	}
	for i, c := range req.GetCalls() {
		cr := &pb.CallResult{}
		resp.Results[i] = cr
		cc := callCtx{parent: ctx}
		if t := c.GetTimeoutUs(); t > 0 {
			cc.deadline = arrived.Add(limiter.MicrosDuration(t))
		}
		if err := cc.err(); err != nil {
			// The caller gave up while the call travelled: do not count it.
			cr.Error = rpc.ErrorToPB(err)
			continue
		}
		entries := rpc.EntriesFromPB(c.GetEntries())
		if err := r.bounds.Check(entries); err != nil {
			cr.Error = rpc.ErrorToPB(err)
			continue
		}
		if lastHop(c) {
			if owner, single := r.ownerOf(r.ring(), entries); single && owner != r.self && c.GetHops() <= maxHops && r.handedAll(entries, owner) {
				// This node handed the keys to their owner already: a
				// count here would stay behind. The call follows them,
				// once (its hop count then exceeds maxHops).
				hctx := cc.get()
				passTo(hctx, cc.cancel, cr, owner, &pb.Call{Entries: c.GetEntries(), Peek: c.GetPeek(), Final: true, Hops: maxHops})
				continue
			}
			if owner, single := r.ownerOf(r.ring(), entries); !single || owner != r.self {
				// Our ring disagrees with the sender's: take the keys'
				// state from it before counting — unless it says it (or
				// another node) counts them: then the call is counted
				// there, as a final call.
				holder := r.fetchFrom(cc.get(), req.GetFrom(), entries)
				r.strays.Store(true)
				if holder != "" && !c.GetFinal() {
					hctx := cc.get()
					passTo(hctx, cc.cancel, cr, holder, &pb.Call{Entries: c.GetEntries(), Peek: c.GetPeek(), Final: true})
					continue
				}
			}
		}
		// Fetch moved state before taking the epoch lock (see Call).
		rg := r.ring()
		if _, hop := r.passOn(c, entries); !hop && r.moves.active() {
			began := time.Now()
			if err := r.moves.ensure(cc.get(), r, rg, entries); err != nil {
				cr.Error = rpc.ErrorToPB(err)
				cc.done()
				continue
			}
			r.slow(began, "first-use fetch (forwarded call)", "", entries[0].Key)
		}
		began := time.Now()
		r.epoch.RLock()
		r.slow(began, "epoch lock (forwarded call)", "", entries[0].Key)
		if r.ring() != rg {
			// The ring changed meanwhile: fetch for the new one too.
			r.epoch.RUnlock()
			if err := r.moves.ensure(cc.get(), r, r.ring(), entries); err != nil {
				cr.Error = rpc.ErrorToPB(err)
				cc.done()
				continue
			}
			r.epoch.RLock()
		}
		if to, ok := r.passOn(c, entries); ok {
			r.epoch.RUnlock()
			// Not ours any more: one more hop, in parallel with the rest.
			hctx := cc.get()
			passTo(hctx, cc.cancel, cr, to, c)
			continue
		}
		if lastHop(c) && c.GetHops() <= maxHops {
			// A last hop for keys this node is handing off right now (their
			// state is in the outbox) or handed off since the check above:
			// counted here, it would go into an engine without their state
			// and stay behind. Wait for the hand-off, then follow the keys,
			// once (see the first branch).
			if owner, single := r.ownerOf(r.ring(), entries); single && owner != r.self && (r.inOutbox(entries) || r.handedAll(entries, owner)) {
				r.epoch.RUnlock()
				r.awaitHandOff(cc.get(), entries)
				if r.handedAll(entries, owner) {
					r.traceEvent(entries[0].Key, "last hop during its hand-off: passed on to "+owner)
					hctx := cc.get()
					passTo(hctx, cc.cancel, cr, owner, &pb.Call{Entries: c.GetEntries(), Peek: c.GetPeek(), Final: true, Hops: maxHops})
					continue
				}
				// The hand-off failed (the state is back in the engine) or
				// the call's time is up: count here, as before.
				r.epoch.RLock()
			}
		}
		if r.tracing() {
			if o, _ := r.ownerOf(r.ring(), entries); o != r.self {
				_, inOutbox := r.outbox.ExportCounter(entries[0].Key, entries[0].Limit.Algorithm, entries[0].Limit.Window)
				_, inEngine := r.engine.ExportCounter(entries[0].Key, entries[0].Limit.Algorithm, entries[0].Limit.Window)
				r.traceEvent(entries[0].Key, fmt.Sprintf("counting a forwarded call the ring gives to %s: from %s, hops %d, final %v, state in engine %v, in outbox %v",
					o, req.GetFrom(), c.GetHops(), c.GetFinal(), inEngine, inOutbox))
			}
		}
		var v limiter.Verdict
		var rs []limiter.Receipt
		err := cc.err() // the caller's time may have run out meanwhile
		if err == nil {
			v, rs, err = r.localReceipts(ctx, entries, c.GetPeek())
		}
		r.epoch.RUnlock()
		cc.done()
		r.stats.Served.Add(1)
		if err != nil {
			cr.Error = rpc.ErrorToPB(err)
			continue
		}
		cr.Verdict = rpc.VerdictToPB(v)
		if len(rs) > 0 {
			cr.Receipts = rpc.ReceiptsToPB(rs, r.self, r.engine.Now())
		}
	}
	hops.Wait()
	return resp, nil
}

// callCtx is a forwarded call's context: the RPC's, bounded by the call's
// own timeout. The bounded context (a timer) is made only when the call
// must wait for something (a fetch, a hop, a hand-off); a call decided at
// once has only its deadline checked.
type callCtx struct {
	parent   context.Context
	deadline time.Time // zero: the RPC's deadline only
	ctx      context.Context
	cancel   context.CancelFunc // set by get; a hop's goroutine calls it
}

func (c *callCtx) get() context.Context {
	if c.ctx == nil {
		c.ctx, c.cancel = c.parent, func() {}
		if !c.deadline.IsZero() {
			c.ctx, c.cancel = context.WithDeadline(c.parent, c.deadline)
		}
	}
	return c.ctx
}

// err is get().Err(), without making the context.
func (c *callCtx) err() error {
	if c.ctx != nil {
		return c.ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// done releases the context, if get made one (and no hop took it over).
func (c *callCtx) done() {
	if c.cancel != nil {
		c.cancel()
	}
}

// inOutbox reports whether any entry's counter is being handed off (its
// state is in the outbox until the new owner has it).
func (r *Router) inOutbox(entries []limiter.Entry) bool {
	for i := range entries {
		e := &entries[i]
		if _, ok := r.outbox.ExportCounter(e.Key, e.Limit.Algorithm, e.Limit.Window); ok {
			return true
		}
	}
	return false
}

// awaitHandOff waits until no entry's counter is in the outbox (its
// hand-off ended, delivered or failed), or until ctx is done. Hand-offs
// are one RPC per peer, so the wait is short and rare: only calls that
// meet a key in transit wait.
func (r *Router) awaitHandOff(ctx context.Context, entries []limiter.Entry) {
	for r.inOutbox(entries) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
	}
}

// handedAll reports whether this node recently handed every entry's key
// to owner.
func (r *Router) handedAll(entries []limiter.Entry, owner string) bool {
	for i := range entries {
		if to, ok := r.handed.get(entries[i].Key, r.cfg.FetchWindow); !ok || to != owner {
			return false
		}
	}
	return true
}

// passOn decides whether a forwarded call goes one hop further: when it is
// not final and this node no longer owns its keys, by its own (newer) ring
// or because it gave them to a new owner that asked.
func (r *Router) passOn(c *pb.Call, entries []limiter.Entry) (string, bool) {
	if lastHop(c) {
		return "", false
	}
	if to, ok := r.movedAny(entries); ok && to != "" {
		return to, true
	}
	owner, single := r.ownerOf(r.ring(), entries)
	if single && owner != r.self {
		if _, ok := r.cfg.Members.Addr(owner); ok {
			return owner, true
		}
	}
	return "", false
}

// maxHops is how many forwards a call takes at most: the last receiver
// counts it wherever its ring says the key lives.
const maxHops = 3

// hops is how many forwards c has taken, its own included.
func hops(c *pb.Call) uint32 {
	switch {
	case c.GetFinal():
		return maxHops
	case c.GetHops() == 0:
		return 1
	}
	return min(c.GetHops(), maxHops)
}

// lastHop reports whether c is counted where it lands.
func lastHop(c *pb.Call) bool { return hops(c) >= maxHops }

// hopResult sends a call one hop further and returns the owner's result as is
// (its receipts name the node that recorded them).
func (r *Router) hopResult(ctx context.Context, to string, c *pb.Call) (*pb.CallResult, error) {
	p, err := r.peer(to)
	if err != nil {
		return nil, err
	}
	call := &pb.Call{Entries: c.GetEntries(), Peek: c.GetPeek(), Hops: hops(c) + 1, Final: c.GetFinal()}
	res, err := p.fwd.Direct(ctx, call)
	if err != nil {
		return nil, err
	}
	out := &pb.CallResult{Verdict: rpc.VerdictToPB(res.Verdict), Receipts: res.Receipts, Error: rpc.ErrorToPB(res.Err)}
	if res.Err != nil {
		out.Verdict = nil
	}
	return out, nil
}

// Release gives back uses recorded here.
func (s peerServer) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	r := s.r
	rs := rpc.ReceiptsFromPB(req.GetReceipts(), r.self, r.engine.Now(), req.GetElapsedUs())
	if err := r.releaseHere(ctx, rs); err != nil {
		return nil, rpc.ToStatus(err)
	}
	return &pb.ReleaseResponse{}, nil
}

// Invalidate drops cached refusals of keys whose owner gave uses back.
func (s peerServer) Invalidate(ctx context.Context, req *pb.InvalidateRequest) (*pb.StateResponse, error) {
	keys := make([]string, len(req.GetKeys()))
	for i, k := range req.GetKeys() {
		keys[i] = string(k)
	}
	s.r.dropRefusals(keys)
	return &pb.StateResponse{}, nil
}

// HandOff merges state of keys this node now owns, within the bounds
// (receiveHandOff).
func (s peerServer) HandOff(ctx context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	return s.r.receiveHandOff(req)
}

// Replicate keeps an owner's latest state of its keys, within the bounds
// (receiveReplicas).
func (s peerServer) Replicate(ctx context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	return s.r.receiveReplicas(req)
}

// Fetch answers a new owner's first-use question, and gives the counters
// up to it: later calls for them are passed on.
func (s peerServer) Fetch(ctx context.Context, req *pb.FetchRequest) (*pb.FetchResponse, error) {
	s.r.learn(req.GetFrom(), req.GetFromAddr())
	states, held := s.r.fetch(req.GetCounters(), req.GetFrom())
	return &pb.FetchResponse{States: rpc.StatesToPB(states), Held: held}, nil
}

func statesAsEntries(cs []limiter.CounterState) []limiter.Entry {
	es := make([]limiter.Entry, len(cs))
	for i, c := range cs {
		es[i] = limiter.Entry{Key: c.Key, Limit: limiter.Limit{Algorithm: c.Algorithm, Window: c.Window, Uses: 1}}
	}
	return es
}

// Run follows ring changes and rebalances until ctx is done or Close.
// changes delivers {Prev, Next} in order (cluster.Subscribe).
func (r *Router) Run(changes <-chan RingChange) {
	r.bg.Add(2)
	go func() {
		defer r.bg.Done()
		for {
			select {
			case <-r.stop:
				return
			case c, ok := <-changes:
				if !ok {
					return
				}
				r.RingChanged(c.Prev, c.Next)
			}
		}
	}()
	go func() {
		defer r.bg.Done()
		t := time.NewTicker(r.cfg.RebalanceInterval)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				// Walking every counter costs; do it only while stray counts
				// are possible: soon after a ring change, or after a failed
				// hand-off or a count this node made for a key it does not own.
				recent := time.Since(time.Unix(0, r.lastChange.Load())) < 30*time.Second
				if rg := r.ring(); rg != nil && (recent || r.strays.Swap(false)) {
					r.handOff(rg, false)
				}
			}
		}
	}()
}

// RingChange is a ring before and after a membership change.
type RingChange struct {
	Prev, Next *ring.Ring
}

// AwaitQuiet waits until no peer has forwarded a call here for quiet (the
// peers have seen this node leave their rings), at most max or until ctx
// is done.
func (r *Router) AwaitQuiet(ctx context.Context, quiet, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if time.Since(time.Unix(0, r.lastServed.Load())) >= quiet {
			return
		}
		time.Sleep(quiet / 4)
	}
}

// Drain stops taking calls (new ones get rpc.ErrShuttingDown), waits for
// the calls under way (bounded by ctx), and hands off every owned key to
// its owner in the ring without this node. Peer RPCs (Fetch, HandOff) are
// still answered until Close.
func (r *Router) Drain(ctx context.Context) error {
	r.gate.Lock()
	r.shut = true
	r.gate.Unlock()
	done := make(chan struct{})
	go func() { r.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	rg := r.ring()
	rest := make([]string, 0, rg.Len())
	for _, m := range rg.Members() {
		if m != r.self {
			rest = append(rest, m)
		}
	}
	if len(rest) == 0 {
		return nil // the last node: nobody to hand off to
	}
	without, err := ring.New(rest, rg.Config())
	if err != nil {
		return err
	}
	r.handOff(without, false)
	return nil
}

// Close stops background work and closes peer connections. Call Drain
// first for a graceful stop.
func (r *Router) Close() error {
	r.closeMu.Do(func() {
		r.gate.Lock()
		r.shut = true
		r.gate.Unlock()
		close(r.stop)
		r.bg.Wait()
		r.repl.close()
		r.peersMu.Lock()
		peers := r.peers
		r.peers = map[string]*peer{}
		r.peersClosed = true
		r.peersMu.Unlock()
		for _, p := range peers {
			p.close()
		}
		r.outbox.Close()
		if r.ownRepl {
			r.replicas.Close()
		}
	})
	return nil
}

// relay passes every call of a Forward on to its owner under this node's
// ring, which no longer holds this node once it announced its leave.
func (r *Router) relay(ctx context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	rg := r.ring()
	resp := &pb.ForwardResponse{Results: make([]*pb.CallResult, len(req.GetCalls()))}
	var wg sync.WaitGroup
	for i, c := range req.GetCalls() {
		entries := rpc.EntriesFromPB(c.GetEntries())
		owner, single := r.ownerOf(rg, entries)
		// Final calls too: a node that is leaving owns nothing, so even a
		// call another node passed on as final goes to the key's owner.
		if len(entries) == 0 || !single || owner == r.self {
			resp.Results[i] = &pb.CallResult{Error: rpc.ErrorToPB(rpc.ErrShuttingDown)}
			continue
		}
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if t := c.GetTimeoutUs(); t > 0 {
			cctx, cancel = context.WithTimeout(ctx, limiter.MicrosDuration(t))
		}
		wg.Go(func() {
			defer cancel()
			res, err := r.hopResult(cctx, owner, c)
			if err != nil {
				res = &pb.CallResult{Error: rpc.ErrorToPB(err)}
			}
			resp.Results[i] = res
		})
	}
	wg.Wait()
	return resp, nil
}
