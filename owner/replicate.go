package owner

import (
	"context"
	"sync"
	"time"

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
// ring successors, batched and asynchronous: the hot path only marks a
// counter dirty; one sender per peer ships everything marked while its
// previous RPC was in flight (natural batching, like forwarding). What was
// admitted but not yet shipped is the only overshoot an owner's crash can
// cause.
type replicator struct {
	r *Router
	n int

	mu      sync.Mutex
	dirty   map[string]map[counterID]struct{} // by peer
	sending map[string]bool
	wg      sync.WaitGroup
	closed  bool
}

func newReplicator(r *Router, n int) *replicator {
	return &replicator{r: r, n: n, dirty: map[string]map[counterID]struct{}{}, sending: map[string]bool{}}
}

// mark records that the entries' counters changed on this owner.
func (p *replicator) mark(rg *ring.Ring, entries []limiter.Entry) {
	if p.n == 0 || rg.Len() < 2 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	for i := range entries {
		e := &entries[i]
		succ, err := rg.Successors(e.Key, p.n+1)
		if err != nil {
			continue
		}
		id := counterID{e.Key, e.Limit.Algorithm, e.Limit.Window}
		for _, s := range succ {
			if s == p.r.self {
				continue
			}
			d := p.dirty[s]
			if d == nil {
				d = map[counterID]struct{}{}
				p.dirty[s] = d
			}
			d[id] = struct{}{}
			if !p.sending[s] {
				p.sending[s] = true
				p.wg.Add(1)
				go p.send(s)
			}
		}
	}
}

// markAll queues every counter this node owns (after a ring change its
// successors may be new).
func (p *replicator) markAll(rg *ring.Ring) {
	if p.n == 0 || rg.Len() < 2 {
		return
	}
	for _, c := range p.r.engine.Export(func(string) bool { return true }, false) {
		p.mark(rg, []limiter.Entry{{Key: c.Key, Limit: limiter.Limit{Algorithm: c.Algorithm, Window: c.Window, Uses: 1}}})
	}
}

const maxStatesPerRPC = 1024

func (p *replicator) send(peer string) {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		d := p.dirty[peer]
		delete(p.dirty, peer)
		if len(d) == 0 || p.closed {
			p.sending[peer] = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		var states []limiter.CounterState
		var gone []limiter.CounterState
		for id := range d {
			c, ok := p.r.engine.ExportCounter(id.key, id.alg, id.window)
			if !ok {
				// Expired or released to nothing: the replica must go too.
				c = limiter.CounterState{Key: id.key, Algorithm: id.alg, Window: id.window}
				gone = append(gone, c)
				continue
			}
			states = append(states, c)
		}
		states = append(states, gone...)
		for len(states) > 0 {
			chunk := states[:min(len(states), maxStatesPerRPC)]
			states = states[len(chunk):]
			if err := p.r.sendStates(peer, chunk, false, false); err != nil {
				p.r.log.Debug("ringlimit: replication failed", "peer", peer, "err", err)
				break
			}
			p.r.stats.Replicated.Add(int64(len(chunk)))
		}
	}
}

func (p *replicator) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}

// sendStates ships counter states to a peer: a hand-off (the peer now owns
// them) or a replication (the peer keeps them in case we die).
func (r *Router) sendStates(peerName string, states []limiter.CounterState, handoff, final bool) error {
	p, err := r.peer(peerName)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ForwardTimeout)
	defer cancel()
	req := &pb.StateRequest{From: r.self, States: rpc.StatesToPB(states), RingVersion: r.cfg.Members.Ring().Version(), Final: final}
	if handoff {
		_, err = p.client.HandOff(ctx, req)
	} else {
		_, err = p.client.Replicate(ctx, req)
	}
	return rpc.FromStatus(err)
}
