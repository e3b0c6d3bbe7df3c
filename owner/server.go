package owner

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// Serve decides calls a peer sent for keys this node owns, one result per
// call, in order; the peer server of package rpc/peer calls it for each
// Forward. A call goes
// one hop further when this node does not count its keys (its ring is
// newer, it gave the keys to a new owner that asked, or another node kept
// them while their rings disagree), until it has taken maxHops forwards:
// then it is counted here. While this node is shutting down it counts
// nothing and relays every call to its owner, so a peer whose ring has not
// yet seen it leave still gets an owner's answer.
func (r *Router) Serve(ctx context.Context, from string, calls []Call) []Result {
	if err := r.enter(); err != nil {
		return r.relay(ctx, calls)
	}
	defer r.exit()
	arrived := r.rt.Now()
	r.lastServed.Store(arrived.UnixNano())
	results := make([]Result, len(calls))
	hops := newGroup(r.rt)
	// passTo sends a call one hop further, in parallel with the rest, and
	// answers with the result of the node it lands on.
	passTo := func(ctx context.Context, cancel context.CancelFunc, cr *Result, to string, c Call) {
		hops.Go(func() {
			defer cancel()
			r.stats.Hopped.Add(1)
			began := r.rt.Now()
			res, err := r.hopResult(ctx, to, c)
			r.slow(began, "hop to", to, c.Entries[0].Key)
			if err != nil {
				*cr = Result{Err: err}
				return
			}
			*cr = res
		})
	}
	var handled []bool
	// One call alone gains nothing from serveHere; it takes the loop.
	if len(calls) > 1 && !r.moves.active() {
		handled = r.serveHere(ctx, calls, results, arrived)
	}
	for i, c := range calls {
		if handled != nil && handled[i] {
			continue
		}
		cr := &results[i]
		cc := callCtx{rt: r.rt, parent: ctx}
		if c.Timeout > 0 {
			cc.deadline = arrived.Add(c.Timeout)
		}
		if err := cc.err(); err != nil {
			// The caller gave up while the call travelled: do not count it.
			cr.Err = err
			continue
		}
		entries := c.Entries
		if err := r.bounds.Check(entries); err != nil {
			cr.Err = err
			continue
		}
		// The hop rule decides (hop.go): pass the call on, ask the sender,
		// wait for a hand-off, or count here under the epoch lock.
		rg := r.ring()
		var known hopFacts
		step := hopRule(c, false, r.hopFacts(rg, c, false))
		if step.Do == askSender {
			known.Asked, known.Holder = true, r.fetchFrom(cc.get(), from, entries)
			r.strays.Store(true)
			f := r.hopFacts(rg, c, false)
			f.Asked, f.Holder = known.Asked, known.Holder
			step = hopRule(c, false, f)
		}
		var v limiter.Verdict
		var rs []limiter.Receipt
		var err error
		counted, recalled := false, false
		for tries := 0; step.Do != passOn && step.Do != moving && step.Do != split; tries++ {
			if err = r.prepare(cc.get(), rg, entries); err != nil {
				break
			}
			var expect *ring.Ring
			if tries < 3 {
				expect = rg // the ring changed meanwhile: fetch for the new one too
			}
			var changed bool
			step, changed = r.underEpoch(c, false, known, expect, func(rg *ring.Ring) {
				counted = true
				r.traceForwardedCount(rg, from, c)
				if err = cc.err(); err == nil { // the caller's time may have run out meanwhile
					v, rs, err = r.localReceipts(ctx, entries, c.Peek)
				}
			})
			switch {
			case changed:
				rg = r.ring()
				continue
			case step.Do == askSender: // the ring moved the keys away meanwhile
				known.Asked, known.Holder = true, r.fetchFrom(cc.get(), from, entries)
				r.strays.Store(true)
				continue
			case step.Do == awaitHandOff:
				r.awaitHandOff(cc.get(), entries)
				known.Waited = true
				continue
			case err == nil && counted && !c.Peek && !v.Allowed && !recalled && r.awaitLeases(cc.get(), entries):
				// Uses of these keys were out on leases: decide again with
				// what their holders gave back (lease_router.go).
				recalled = true
				continue
			}
			break
		}
		if counted {
			r.stats.Served.Add(1)
		}
		switch {
		case err != nil:
			cc.done()
			cr.Err = err
			continue
		case step.Do == moving:
			cc.done()
			cr.Err = fmt.Errorf("%w: the call's keys are moving between owners", ErrUnavailable)
			continue
		case step.Do == split:
			hctx, cancel := cc.get(), cc.cancel
			sc := c // the loop's c stays on the stack
			hops.Go(func() {
				defer cancel()
				*cr = r.spreadForwarded(hctx, sc)
			})
			continue
		case step.Do == passOn:
			if step.Call.Final && known.Waited {
				r.traceEvent(entries[0].Key, "last hop during its hand-off: passed on to "+step.To)
			}
			passTo(cc.get(), cc.cancel, cr, step.To, step.Call)
			continue
		}
		cc.done()
		cr.Verdict = v
		if len(rs) > 0 {
			cr.Receipts = ReceiptsFromEngine(rs, r.self, r.engine.Now())
		}
	}
	hops.Wait()
	return results
}

// serveHere decides together, under one hold of the epoch lock, the calls
// of a forward that this node counts by its ring with no custody fact and
// nothing to fetch: hop rule 2's and 4's countHere for a node that owns
// the keys, which Serve's loop would reach one call at a time. It reports
// which calls it answered; the others (past their deadline, out of
// bounds, for other owners, a refusal while leases are out) take Serve's
// loop.
func (r *Router) serveHere(ctx context.Context, calls []Call, results []Result, arrived time.Time) []bool {
	if ctx.Err() != nil {
		return nil
	}
	r.epoch.RLock()
	defer r.epoch.RUnlock()
	rg := r.ring()
	leases := r.leases.Load() != nil
	now := r.rt.Now()
	var handled []bool
	var buf [32]int
	admitted := buf[:0]
	served := 0
	for i := range calls {
		c := &calls[i]
		if c.Timeout > 0 && !now.Before(arrived.Add(c.Timeout)) {
			continue
		}
		if len(c.Entries) == 0 || r.bounds.Check(c.Entries) != nil {
			continue
		}
		if f := r.hopFacts(rg, *c, false); f.Owner != r.self || f.Given {
			continue
		}
		v, rs, err := r.engine.ConsumeReceipts(ctx, c.Entries, !c.Peek)
		if err == nil && !c.Peek && !v.Allowed && leases && !c.Entries[0].Debit {
			continue // Serve's loop asks the lease holders back first
		}
		if handled == nil {
			handled = make([]bool, len(calls))
		}
		handled[i] = true
		served++
		if err != nil {
			results[i] = Result{Err: err}
			continue
		}
		results[i] = Result{Verdict: v}
		if len(rs) > 0 {
			results[i].Receipts = ReceiptsFromEngine(rs, r.self, r.engine.Now())
		}
		if !c.Peek && v.Allowed {
			r.traceAdmit(c.Entries, "forwarded")
			admitted = append(admitted, i)
		}
	}
	r.stats.Served.Add(int64(served))
	r.repl.markEach(rg, len(admitted), func(k int) []limiter.Entry { return calls[admitted[k]].Entries })
	return handled
}

// traceForwardedCount traces a forwarded call counted on a node whose
// ring gives its keys to another (under the epoch lock).
func (r *Router) traceForwardedCount(rg *ring.Ring, from string, c Call) {
	if !r.tracing() {
		return
	}
	entries := c.Entries
	if o, _ := r.ownerOf(rg, entries); o != r.self {
		_, inOutbox := r.outbox.ExportCounter(entries[0].Key, entries[0].Limit.Algorithm, entries[0].Limit.Window)
		_, inEngine := r.engine.ExportCounter(entries[0].Key, entries[0].Limit.Algorithm, entries[0].Limit.Window)
		r.traceEvent(entries[0].Key, fmt.Sprintf("counting a forwarded call the ring gives to %s: from %s, hops %d, final %v, state in engine %v, in outbox %v",
			o, from, c.Hops, c.Final, inEngine, inOutbox))
	}
}

// callCtx is a forwarded call's context: the RPC's, bounded by the call's
// own timeout. The bounded context (a timer) is made only when the call
// must wait for something (a fetch, a hop, a hand-off); a call decided at
// once has only its deadline checked.
type callCtx struct {
	rt       Runtime
	parent   context.Context
	deadline time.Time // zero: the RPC's deadline only
	ctx      context.Context
	cancel   context.CancelFunc // set by get; a hop's goroutine calls it
}

func (c *callCtx) get() context.Context {
	if c.ctx == nil {
		c.ctx, c.cancel = c.parent, func() {}
		if !c.deadline.IsZero() {
			c.ctx, c.cancel = c.rt.WithTimeout(c.parent, c.deadline.Sub(c.rt.Now()))
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
	if !c.deadline.IsZero() && !c.rt.Now().Before(c.deadline) {
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
		_ = r.rt.Sleep(ctx, time.Millisecond)
	}
}

// handedAll reports whether this node recently handed every entry's key
// to owner.
func (r *Router) handedAll(entries []limiter.Entry, owner string) bool {
	for i := range entries {
		if to, ok := r.custody.HandedTo(entries[i].Key); !ok || to != owner {
			return false
		}
	}
	return true
}

// hopResult sends call to to as it is (see hopRule) and returns that
// node's result (its receipts name the node that recorded them).
func (r *Router) hopResult(ctx context.Context, to string, call Call) (Result, error) {
	res, err := r.peers.Forward(ctx, to, call)
	if err != nil {
		return Result{}, err
	}
	if res.Err != nil {
		return Result{Err: res.Err}, nil
	}
	return Result{Verdict: res.Verdict, Receipts: res.Receipts}, nil
}

// ServeRelease gives back uses recorded here; elapsed is the time since
// the receipts' verdict on the asker's clock.
func (r *Router) ServeRelease(ctx context.Context, rs []Receipt, elapsed time.Duration) error {
	return r.releaseHere(ctx, ReceiptsToEngine(rs, r.self, r.engine.Now(), limiter.Micros(elapsed)))
}

// ServeInvalidate drops cached refusals of keys whose owner gave uses back.
func (r *Router) ServeInvalidate(keys []string) { r.dropRefusals(keys) }

// ServeFetch answers a new owner's first-use question, and gives the
// counters up to it: later calls for them are passed on (see fetch).
func (r *Router) ServeFetch(req FetchRequest) FetchAnswer {
	states, held := r.fetch(req.Counters, req.From, req.NoClaim)
	return FetchAnswer{States: states, Held: held}
}

func statesAsEntries(cs []limiter.CounterState) []limiter.Entry {
	es := make([]limiter.Entry, len(cs))
	for i, c := range cs {
		es[i] = limiter.Entry{Key: c.Key, Limit: limiter.Limit{Algorithm: c.Algorithm, Window: c.Window, Uses: 1}}
	}
	return es
}

// Run follows ring changes (changes delivers {Prev, Next} in order, as
// cluster.Subscribe does) and starts the background work (Start) until
// Close.
func (r *Router) Run(changes <-chan RingChange) {
	r.Start()
	r.bg.Go(func() {
		for {
			select {
			case <-r.stopCtx.Done():
				return
			case c, ok := <-changes:
				if !ok {
					return
				}
				r.RingChanged(c.Prev, c.Next)
			}
		}
	})
}

// Start starts the background work, until Close: rebalancing (handing
// off counts that sit on this node but belong to another) and
// replication. A runtime driving ring changes itself (the simulator)
// calls RingChanged and Start instead of Run.
func (r *Router) Start() {
	r.repl.start()
	r.bg.Go(func() {
		for r.rt.Sleep(r.stopCtx, r.cfg.RebalanceInterval) == nil {
			// Walking every counter costs; do it only while stray counts
			// are possible: soon after a ring change, or after a failed
			// hand-off or a count this node made for a key it does not own.
			recent := r.rt.Now().Sub(time.Unix(0, r.lastChange.Load())) < 30*time.Second
			if rg := r.ring(); rg != nil && (recent || r.strays.Swap(false)) {
				r.handOff(rg, false)
			}
		}
	})
}

// RingChange is a ring before and after a membership change.
type RingChange struct {
	Prev, Next *ring.Ring
}

// AwaitQuiet waits until no peer has forwarded a call here for quiet (the
// peers have seen this node leave their rings), at most max or until ctx
// is done.
func (r *Router) AwaitQuiet(ctx context.Context, quiet, max time.Duration) {
	deadline := r.rt.Now().Add(max)
	for r.rt.Now().Before(deadline) && ctx.Err() == nil {
		if r.rt.Now().Sub(time.Unix(0, r.lastServed.Load())) >= quiet {
			return
		}
		if r.rt.Sleep(ctx, quiet/4) != nil {
			return
		}
	}
}

// Drain stops taking calls (new ones get ErrShuttingDown), waits for
// the calls under way (bounded by ctx), and hands off every owned key to
// its owner in the ring without this node. Peer RPCs (Fetch, HandOff) are
// still answered until Close.
func (r *Router) Drain(ctx context.Context) error {
	r.shut.Store(true)
	if r.calls.Load() == 0 {
		r.drained.Fire()
	}
	if err := r.drained.Wait(ctx); err != nil {
		return err
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

// Close stops background work. Call Drain first for a graceful stop. The
// Peers implementation is the caller's to close, after the router.
func (r *Router) Close() error {
	r.closeMu.Do(func() {
		r.shut.Store(true)
		r.stop()
		r.bg.Wait()
		r.repl.close()
		r.outbox.Close()
		if r.ownRepl {
			r.replicas.Close()
		}
	})
	return nil
}

// relay passes every call of a Forward on to its owner under this node's
// ring, which no longer holds this node once it announced its leave.
func (r *Router) relay(ctx context.Context, calls []Call) []Result {
	rg := r.ring()
	results := make([]Result, len(calls))
	g := newGroup(r.rt)
	for i, c := range calls {
		entries := c.Entries
		owner, single := "", false
		if len(entries) > 0 {
			owner, single = r.ownerOf(rg, entries)
		}
		// Final calls too: a node that is leaving owns nothing, so even a
		// call another node passed on as final goes to the key's owner.
		if !single || owner == r.self {
			results[i] = Result{Err: ErrShuttingDown}
			continue
		}
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if c.Timeout > 0 {
			cctx, cancel = r.rt.WithTimeout(ctx, c.Timeout)
		}
		g.Go(func() {
			defer cancel()
			res, err := r.hopResult(cctx, owner, onward(c))
			if err != nil {
				res = Result{Err: err}
			}
			results[i] = res
		})
	}
	g.Wait()
	return results
}
