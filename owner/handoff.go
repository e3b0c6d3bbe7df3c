package owner

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// moves tracks the latest ring change, so that on first use of a key this
// node newly owns it asks the key's previous owner (and, if that one is
// gone, the key's replica holders under the previous ring) for its state
// before answering, instead of counting from nothing while the hand-off is
// still on its way.
type moves struct {
	cur atomic.Pointer[transition]
}

type transition struct {
	prev  *ring.Ring
	next  *ring.Ring
	since time.Time

	mu      sync.Mutex
	done    map[string]bool // peers whose final hand-off for next arrived
	fetched map[counterID]struct{}
}

const maxFetched = 1 << 20

func newMoves() *moves { return &moves{} }

func (m *moves) begin(prev, next *ring.Ring) {
	if prev == nil {
		m.cur.Store(nil)
		return
	}
	m.cur.Store(&transition{prev: prev, next: next, since: time.Now(), done: map[string]bool{}, fetched: map[counterID]struct{}{}})
}

// handedOff records that from finished its hand-off for the ring version.
func (m *moves) handedOff(from string, version uint64) {
	t := m.cur.Load()
	if t == nil || t.next.Version() != version {
		return
	}
	t.mu.Lock()
	t.done[from] = true
	t.mu.Unlock()
}

// ensure fetches, once per counter and transition, the state of entries
// this node did not own before the last ring change.
func (m *moves) ensure(ctx context.Context, r *Router, rg *ring.Ring, entries []limiter.Entry) {
	t := m.cur.Load()
	if t == nil {
		return
	}
	if time.Since(t.since) > r.cfg.FetchWindow {
		m.cur.CompareAndSwap(t, nil)
		return
	}
	type want struct {
		id      counterID
		sources []string
	}
	var wants []want
	t.mu.Lock()
	for i := range entries {
		e := &entries[i]
		id := counterID{e.Key, e.Limit.Algorithm, e.Limit.Window}
		if _, ok := t.fetched[id]; ok {
			continue
		}
		prevOwner, err := t.prev.Owner(e.Key)
		if err != nil || prevOwner == r.self {
			continue
		}
		var sources []string
		if rg.Has(prevOwner) {
			if !t.done[prevOwner] {
				sources = append(sources, prevOwner)
			}
		} else if r.cfg.Replication > 0 {
			// The previous owner is gone: its replicas hold the state.
			succ, _ := t.prev.Successors(e.Key, r.cfg.Replication+1)
			for _, s := range succ[1:] {
				if s != r.self && rg.Has(s) {
					sources = append(sources, s)
				}
			}
		}
		if len(t.fetched) >= maxFetched {
			clear(t.fetched)
		}
		t.fetched[id] = struct{}{}
		if len(sources) > 0 {
			wants = append(wants, want{id, sources})
		}
	}
	t.mu.Unlock()
	if len(wants) == 0 {
		return
	}
	byPeer := map[string][]*pb.FetchRequest_Counter{}
	for _, w := range wants {
		for _, s := range w.sources {
			byPeer[s] = append(byPeer[s], &pb.FetchRequest_Counter{Key: []byte(w.id.key), Algorithm: pb.Algorithm(w.id.alg), WindowMs: int64(w.id.window / time.Millisecond)})
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.FetchTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for name, counters := range byPeer {
		wg.Go(func() {
			p, err := r.peer(name)
			if err != nil {
				return
			}
			resp, err := p.client.Fetch(fctx, &pb.FetchRequest{Counters: counters})
			if err != nil {
				r.log.Debug("ringlimit: first-use fetch failed", "peer", name, "err", err)
				return
			}
			states := rpc.StatesFromPB(resp.GetStates())
			r.engine.Import(states)
			r.stats.Fetched.Add(int64(len(states)))
		})
	}
	wg.Wait()
}

// RingChanged reacts to a membership change: adopt replicated state of
// keys this node now owns, hand off state of keys it no longer owns, and
// replicate owned keys to their (possibly new) successors.
func (r *Router) RingChanged(prev, next *ring.Ring) {
	r.moves.begin(prev, next)
	if next == nil {
		return
	}
	owns := func(key string) bool {
		o, err := next.Owner(key)
		return err == nil && o == r.self
	}
	if prev != nil {
		adopted := r.replicas.Export(owns, true)
		if len(adopted) > 0 {
			r.engine.Import(adopted)
			r.stats.Adopted.Add(int64(len(adopted)))
			r.log.Info("ringlimit: adopted replicated state", "counters", len(adopted))
		}
	}
	r.handOff(next, true)
	r.repl.markAll(next)
}

// handOff sends every counter this node holds but does not own under rg to
// its owner. States in transit stay in the outbox (answering fetches) until
// the owner has them; a failed send puts them back in the engine for the
// next try.
func (r *Router) handOff(rg *ring.Ring, announce bool) int {
	notOurs := func(key string) bool {
		o, err := rg.Owner(key)
		return err == nil && o != r.self
	}
	states := r.engine.Export(notOurs, true)
	byOwner := map[string][]limiter.CounterState{}
	for _, c := range states {
		o, _ := rg.Owner(c.Key)
		byOwner[o] = append(byOwner[o], c)
	}
	if announce {
		for _, m := range rg.Members() {
			if m != r.self {
				if _, ok := byOwner[m]; !ok {
					byOwner[m] = nil
				}
			}
		}
	}
	r.outbox.Import(states)
	sent := 0
	var wg sync.WaitGroup
	var mu sync.Mutex
	for owner, cs := range byOwner {
		wg.Go(func() {
			ok := true
			for i := 0; i == 0 || i < len(cs); i += maxStatesPerRPC {
				chunk := cs[i:min(len(cs), i+maxStatesPerRPC)]
				final := i+maxStatesPerRPC >= len(cs)
				if err := r.sendStates(owner, chunk, true, final); err != nil {
					r.log.Warn("ringlimit: hand-off failed; keeping the state for a retry", "owner", owner, "counters", len(cs)-i, "err", err)
					ok = false
					break
				}
			}
			r.takeFromOutbox(cs, !ok)
			if ok {
				mu.Lock()
				sent += len(cs)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.stats.HandedOff.Add(int64(sent))
	if sent > 0 {
		r.log.Info("ringlimit: handed off state", "counters", sent, "ring", rg.String())
	}
	return sent
}

// takeFromOutbox drops states whose hand-off ended; back puts them into
// the engine again (the hand-off failed).
func (r *Router) takeFromOutbox(cs []limiter.CounterState, back bool) {
	for _, c := range cs {
		st, ok := r.outbox.ExportCounter(c.Key, c.Algorithm, c.Window)
		r.outbox.Delete(c.Key, c.Algorithm, c.Window)
		if back && ok {
			r.engine.Import([]limiter.CounterState{st})
		}
	}
}

// fetch answers a peer's first-use question from everything this node
// holds for the counters: its engine, its outbox and its replicas.
func (r *Router) fetch(counters []*pb.FetchRequest_Counter) []limiter.CounterState {
	var out []limiter.CounterState
	for _, c := range counters {
		key, alg := string(c.GetKey()), limiter.Algorithm(c.GetAlgorithm())
		w := time.Duration(c.GetWindowMs()) * time.Millisecond
		for _, m := range []*limiter.Memory{r.engine, r.outbox, r.replicas} {
			if st, ok := m.ExportCounter(key, alg, w); ok {
				out = append(out, st)
			}
		}
	}
	return out
}
