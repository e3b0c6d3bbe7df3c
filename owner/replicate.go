package owner

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// counterID names a counter across the router's maps.
type counterID struct {
	key    string
	alg    limiter.Algorithm
	window time.Duration
}

// replicator streams the state of changed counters to each key's next R
// ring successors, batched and asynchronous: the hot path only adds the
// counter to a dirty set; one sender goroutine wakes, waits Delay so that
// more changes gather, and ships everything dirty to each successor in one
// RPC per peer. What was admitted but not yet shipped is the only
// overshoot an owner's crash can cause: about Delay (10 ms by default)
// plus one round trip.
//
// A sliding log ships only the calls recorded since its last shipment
// (limiter.Memory.ExportChange) to successors that said they merge such
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
	dirty    map[counterID]bool
	shipping bool
	// since is when the oldest change in dirty was marked (zero while
	// dirty is empty); shipSince the same for the shipment under way.
	// Together they give the replication lag an operator alerts on.
	since, shipSince time.Time
	wake             chan struct{}
	stop             chan struct{}
	wg               sync.WaitGroup
	once             sync.Once
}

func newReplicator(r *Router, n int, delay time.Duration) *replicator {
	p := &replicator{r: r, n: n, delay: delay, dirty: map[counterID]bool{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	if n > 0 {
		p.wg.Add(1)
		go p.loop()
	}
	return p
}

// mark records that the entries' counters changed on this owner; whole:
// the successors need their whole state (they may be new).
func (p *replicator) mark(rg *ring.Ring, entries []limiter.Entry, whole bool) {
	if p.n == 0 || rg.Len() < 2 {
		return
	}
	p.mu.Lock()
	if len(p.dirty) == 0 && len(entries) > 0 {
		p.since = time.Now()
	}
	for i := range entries {
		e := &entries[i]
		id := counterID{e.Key, e.Limit.Algorithm, e.Limit.Window}
		if whole {
			p.dirty[id] = true
		} else if _, ok := p.dirty[id]; !ok {
			p.dirty[id] = false
		}
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// markAll queues every counter this node owns (after a ring change its
// successors may be new).
func (p *replicator) markAll(rg *ring.Ring) {
	if p.n == 0 || rg.Len() < 2 {
		return
	}
	cs := p.r.engine.Export(func(string) bool { return true }, false)
	es := make([]limiter.Entry, len(cs))
	for i, c := range cs {
		es[i] = limiter.Entry{Key: c.Key, Limit: limiter.Limit{Algorithm: c.Algorithm, Window: c.Window, Uses: 1}}
	}
	p.mark(rg, es, true)
}

const maxStatesPerRPC = 1024

func (p *replicator) loop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		}
		if p.delay > 0 {
			select {
			case <-p.stop:
				return
			case <-time.After(p.delay):
			}
		}
		p.mu.Lock()
		d := p.dirty
		p.dirty = make(map[counterID]bool, len(d))
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
	return time.Since(oldest)
}

// ship exports the dirty counters and sends each successor its share.
func (p *replicator) ship(d map[counterID]bool) {
	rg := p.r.ring()
	byPeer := map[string][]limiter.CounterState{}
	deltas := map[string]bool{} // by peer: it merges deltas
	for id, whole := range d {
		succ, err := rg.Successors(id.key, p.n+1)
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
				ok = p.r.mergesDeltas(s)
				deltas[s] = ok
			}
			delta = delta && ok
		}
		c, ok := p.r.engine.ExportChange(id.key, id.alg, id.window, delta)
		if !ok {
			// Expired or released to nothing: the replica must go too.
			c = limiter.CounterState{Key: id.key, Algorithm: id.alg, Window: id.window}
		} else if c.Delta && len(c.Log) == 0 {
			continue // nothing new since the last shipment
		}
		for _, s := range succ {
			if s != p.r.self {
				byPeer[s] = append(byPeer[s], c)
			}
		}
	}
	var wg sync.WaitGroup
	for peer, states := range byPeer {
		wg.Go(func() {
			for len(states) > 0 {
				chunk := states[:min(len(states), maxStatesPerRPC)]
				if err := p.r.sendStates(peer, chunk, false, false, rg.Version()); err != nil {
					p.r.log.Debug("ringlimit: replication failed", "peer", peer, "err", err)
					p.r.stats.ReplicateErrors.Add(1)
					// The peer may lack what it was not sent: the next
					// shipment of these counters is whole.
					for _, c := range states {
						p.r.engine.Unship(c.Key, c.Algorithm, c.Window)
					}
					return
				}
				states = states[len(chunk):]
				p.r.stats.Replicated.Add(int64(len(chunk)))
			}
		})
	}
	wg.Wait()
}

func (p *replicator) close() {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
}

// waitReady makes a state RPC (bounded by its deadline) wait for a peer's
// connection to come up rather than fail at once: a node restarted at the
// same address is reconnecting when its ring change sends it state.
var waitReady = grpc.WaitForReady(true)

// sendStates ships counter states to a peer: a hand-off (the peer now owns
// them) or a replication (the peer keeps them in case we die).
func (r *Router) sendStates(peerName string, states []limiter.CounterState, handoff, final bool, version uint64) error {
	p, err := r.peer(peerName)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ForwardTimeout)
	defer cancel()
	req := &pb.StateRequest{From: r.self, States: rpc.StatesToPB(states), RingVersion: version, Final: final}
	if handoff {
		_, err = p.client.HandOff(ctx, req, waitReady)
	} else {
		var resp *pb.StateResponse
		resp, err = p.client.Replicate(ctx, req, waitReady)
		if err == nil {
			p.mergesDeltas.Store(resp.GetMergesDeltas())
			for _, c := range resp.GetMissing() {
				r.engine.Unship(string(c.GetKey()), limiter.Algorithm(c.GetAlgorithm()), time.Duration(c.GetWindowMs())*time.Millisecond)
			}
		}
	}
	return rpc.FromStatus(err)
}

// mergesDeltas reports whether a peer said it merges replicated deltas (it
// answered a Replicate so); false for a peer not yet heard from.
func (r *Router) mergesDeltas(name string) bool {
	r.peersMu.Lock()
	p := r.peers[name]
	r.peersMu.Unlock()
	return p != nil && p.mergesDeltas.Load()
}
