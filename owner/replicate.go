package owner

import (
	"context"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/internal/sabotage"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// replicator streams the state of changed counters to each key's next R
// ring successors, batched and asynchronous: the hot path only adds the
// counter to a dirty set; one sender goroutine wakes, waits Delay so that
// more changes gather, and ships everything dirty to each successor in one
// RPC per peer. What was admitted but not yet shipped is the only
// overshoot an owner's crash can cause: about Delay (10 ms by default)
// plus one round trip.
//
// A sliding log ships only the calls recorded since its last shipment
// (limiter.Memory.AppendExportShipped, from the replication cursor the
// store keeps in each log) to successors that said they merge such
// deltas, so a key's replication costs one entry per call, not its whole
// log each time; a release, a merge, a ring change or a failed shipment
// makes the next one whole.
type replicator struct {
	r     *Router
	n     int
	delay time.Duration

	mu sync.Mutex
	// dirty holds the counters changed since the last shipment; true: the
	// successors need the whole state, not the calls since then.
	dirty    map[CounterID]bool
	shipping bool
	// since is when the oldest change in dirty was marked (zero while
	// dirty is empty); shipSince the same for the shipment under way.
	// Together they give the replication lag an operator alerts on.
	since, shipSince time.Time
	// wake fires when dirty gains its first counter since the last swap.
	wake Signal
	// mergesDeltas: successors whose last Replicate answer said they
	// merge sliding-log deltas (StateAck.MergesDeltas).
	mergesDeltas sync.Map // string -> bool
	done         Signal   // fired when the loop ends (or at once: no loop)
	started      bool
}

func newReplicator(r *Router, n int, delay time.Duration) *replicator {
	return &replicator{r: r, n: n, delay: delay, dirty: map[CounterID]bool{}, wake: r.rt.NewSignal(), done: r.rt.NewSignal()}
}

// start runs the sender task until the router closes.
func (p *replicator) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.n == 0 {
		return
	}
	p.started = true
	p.r.rt.Go(p.loop)
}

// mark records that the entries' counters changed on this owner; whole:
// the successors need their whole state (they may be new).
func (p *replicator) mark(rg *ring.Ring, entries []limiter.Entry, whole bool) {
	if p.n == 0 || rg.Len() < 2 {
		return
	}
	p.mu.Lock()
	if len(p.dirty) == 0 && len(entries) > 0 {
		p.since = p.r.rt.Now()
	}
	for i := range entries {
		p.dirtyLocked(&entries[i], whole)
	}
	wake := p.wake
	p.mu.Unlock()
	wake.Fire()
}

// dirtyLocked adds e's counter to the dirty set (callers hold mu).
func (p *replicator) dirtyLocked(e *limiter.Entry, whole bool) {
	id := CounterID{e.Key, e.Limit.Algorithm, e.Limit.Window}
	if whole {
		p.dirty[id] = true
	} else if _, ok := p.dirty[id]; !ok {
		p.dirty[id] = false
	}
}

// markEach is mark for the entries of n batches, entries(k) the k-th, under
// one hold of the lock.
func (p *replicator) markEach(rg *ring.Ring, n int, entries func(k int) []limiter.Entry) {
	if p.n == 0 || rg.Len() < 2 || n == 0 {
		return
	}
	p.mu.Lock()
	if len(p.dirty) == 0 {
		p.since = p.r.rt.Now()
	}
	for k := range n {
		es := entries(k)
		for j := range es {
			p.dirtyLocked(&es[j], false)
		}
	}
	wake := p.wake
	p.mu.Unlock()
	wake.Fire()
}

// markAll queues every counter this node owns (after a ring change its
// successors may be new).
func (p *replicator) markAll(rg *ring.Ring) {
	if p.n == 0 || rg.Len() < 2 {
		return
	}
	// whole: the successors may be new, so no counter ships as a delta
	// from the cursor the store keeps for the old ones.
	cs := p.r.engine.Export(func(string) bool { return true }, false)
	es := make([]limiter.Entry, len(cs))
	for i, c := range cs {
		es[i] = limiter.Entry{Key: c.Key, Limit: limiter.Limit{Algorithm: c.Algorithm, Window: c.Window, Uses: 1}}
	}
	p.mark(rg, es, true)
}

const maxStatesPerRPC = 1024

func (p *replicator) loop() {
	defer p.done.Fire()
	stop := p.r.stopCtx
	for {
		p.mu.Lock()
		wake := p.wake
		p.mu.Unlock()
		if wake.Wait(stop) != nil {
			return
		}
		if p.delay > 0 && p.r.rt.Sleep(stop, p.delay) != nil {
			return
		}
		p.mu.Lock()
		d := p.dirty
		p.dirty = make(map[CounterID]bool, len(d))
		p.wake = p.r.rt.NewSignal()
		p.shipping = true
		p.shipSince, p.since = p.since, time.Time{}
		p.mu.Unlock()
		p.ship(d)
		p.mu.Lock()
		p.shipping = false
		p.shipSince = time.Time{}
		p.mu.Unlock()
	}
}

// idle reports whether every change marked so far has been shipped.
func (p *replicator) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.dirty) == 0 && !p.shipping
}

// lag is how long the oldest change not yet shipped (or being shipped)
// has waited; 0 when every change is shipped. A failed shipment ends its
// wait too (it is counted in Stats.ReplicateErrors instead).
func (p *replicator) lag() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	oldest := p.since
	if !p.shipSince.IsZero() && (oldest.IsZero() || p.shipSince.Before(oldest)) {
		oldest = p.shipSince
	}
	if oldest.IsZero() {
		return 0
	}
	return p.r.rt.Now().Sub(oldest)
}

// shipScratch is what one shipment builds, kept for the next (a loaded
// owner ships every few milliseconds): each successor's states, and the
// sliding-log calls they hold. The Peers implementation keeps none of it
// once a Replicate returns.
type shipScratch struct {
	byPeer map[string][]limiter.CounterState
	uses   []limiter.LogUse
}

// Past these sizes a shipment's scratch is dropped, not kept: a ring
// change ships every counter whole once.
const (
	maxKeptStates = 4 * maxStatesPerRPC
	maxKeptUses   = 1 << 16
)

var shipScratches = sync.Pool{New: func() any { return &shipScratch{byPeer: map[string][]limiter.CounterState{}} }}

// done readies the scratch for the next shipment and gives it back.
func (sc *shipScratch) done() {
	for peer, states := range sc.byPeer {
		if cap(states) > maxKeptStates || len(sc.byPeer) > 16 {
			delete(sc.byPeer, peer)
			continue
		}
		clear(states) // drop the keys and logs they point to
		sc.byPeer[peer] = states[:0]
	}
	if cap(sc.uses) > maxKeptUses {
		sc.uses = nil
	}
	sc.uses = sc.uses[:0]
	shipScratches.Put(sc)
}

// ship exports the dirty counters and sends each successor its share. It
// returns the counters some successor was not sent (its shipment failed;
// their next shipment is whole).
func (p *replicator) ship(d map[CounterID]bool) (failed []CounterID) {
	rg := p.r.ring()
	sc := shipScratches.Get().(*shipScratch)
	defer sc.done()
	byPeer := sc.byPeer
	deltas := map[string]bool{} // by peer: it merges deltas
	var succ []string           // one slice for every counter
	for id, whole := range d {
		var err error
		succ, err = rg.AppendSuccessors(succ[:0], id.Key, p.n+1)
		if err != nil {
			continue
		}
		delta := !whole
		for _, s := range succ {
			if s == p.r.self {
				continue
			}
			ok, seen := deltas[s]
			if !seen {
				ok = p.mergesDeltasOf(s)
				deltas[s] = ok
			}
			delta = delta && ok
		}
		var c limiter.CounterState
		var ok bool
		c, ok, sc.uses = p.r.engine.AppendExportShipped(sc.uses, id.Key, id.Algorithm, id.Window, delta && id.Algorithm == limiter.SlidingLog)
		if !ok {
			// Expired or released to nothing: the replica must go too.
			c = limiter.CounterState{Key: id.Key, Algorithm: id.Algorithm, Window: id.Window}
		} else if c.Delta && len(c.Log) == 0 {
			continue // nothing new since the last shipment
		}
		for _, s := range succ {
			if s != p.r.self {
				byPeer[s] = append(byPeer[s], c)
			}
		}
	}
	g := newGroup(p.r.rt)
	var mu sync.Mutex
	for _, peer := range sortedKeys(byPeer) {
		states := byPeer[peer]
		if len(states) == 0 {
			continue // a peer of an earlier shipment
		}
		g.Go(func() {
			for len(states) > 0 {
				chunk := states[:min(len(states), maxStatesPerRPC)]
				if err := p.r.sendStates(peer, chunk, false, false, rg.Version()); err != nil {
					p.r.log.Debug("ringlimit: replication failed", "peer", peer, "err", err)
					p.r.stats.ReplicateErrors.Add(1)
					// The peer may lack what it was not sent: the next
					// shipment of these counters is whole.
					mu.Lock()
					defer mu.Unlock()
					for _, c := range states {
						id := CounterID{c.Key, c.Algorithm, c.Window}
						p.forget(id)
						failed = append(failed, id)
					}
					return
				}
				states = states[len(chunk):]
				p.r.stats.Replicated.Add(int64(len(chunk)))
			}
		})
	}
	g.Wait()
	return failed
}

// close waits for the sender task to end (the router's stop context is
// done by then).
func (p *replicator) close() {
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if started {
		_ = p.done.Wait(context.Background())
	}
}

// forget makes the next shipment of a counter whole (a successor may
// lack what it was sent: the shipment failed, or it said it misses it).
func (p *replicator) forget(id CounterID) {
	p.r.engine.ForgetShipped(id.Key, id.Algorithm, id.Window)
}

// mergesDeltasOf reports whether a peer said it merges replicated deltas
// (it answered a Replicate so); false for a peer not yet heard from.
func (p *replicator) mergesDeltasOf(name string) bool {
	v, ok := p.mergesDeltas.Load(name)
	return ok && v.(bool)
}

// sendStates ships counter states to a peer: a hand-off (the peer now owns
// them) or a replication (the peer keeps them in case we die).
func (r *Router) sendStates(peer string, states []limiter.CounterState, handoff, final bool, version uint64) error {
	ctx, cancel := r.rt.WithTimeout(context.Background(), r.cfg.ForwardTimeout)
	defer cancel()
	b := StateBatch{From: r.self, States: states, RingVersion: version, Final: final}
	if handoff {
		_, err := r.peers.HandOff(ctx, peer, b)
		return err
	}
	if sabotage.On(sabotage.DropReplica) {
		return nil // test-only (internal/sabotage): lost without a word
	}
	ack, err := r.peers.Replicate(ctx, peer, b)
	if err != nil {
		return err
	}
	r.repl.mergesDeltas.Store(peer, ack.MergesDeltas)
	for _, c := range ack.Missing {
		r.repl.forget(c)
	}
	return nil
}
