package owner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/internal/sabotage"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// moves tracks the latest ring change, so that on first use of a key this
// node newly owns it asks the key's previous owner (and, if that one is
// gone, the key's replica holders under the previous ring) for its state
// before answering, instead of counting from nothing while the hand-off is
// still on its way.
type moves struct {
	rt  Runtime
	cur atomic.Pointer[transition]
}

type transition struct {
	// prevs are the rings a key's state may come from: this node's ring
	// before the change, and the new ring without this node (for a node
	// that just joined, its own ring history may be partial, while the
	// cluster's ring before it joined is the new one without it).
	prevs []*ring.Ring
	next  *ring.Ring
	// ownPrev is this node's own ring before the change, if it was on it:
	// keys it owned there need no fetch.
	ownPrev *ring.Ring
	since   time.Time

	mu sync.Mutex
	// fetched holds, per counter, a channel closed when its first-use
	// fetch is done: a second call for the counter waits for it rather
	// than count from nothing while the first call's fetch is out.
	fetched map[CounterID]*fetchOp
}

// fetchOp is one first-use fetch under way or done.
type fetchOp struct {
	done Signal
	err  error // set before done fires: no source answered
}

const maxFetched = 1 << 20

func newMoves(rt Runtime) *moves { return &moves{rt: rt} }

func (m *moves) begin(self string, prev, next *ring.Ring) {
	var prevs []*ring.Ring
	if prev != nil {
		prevs = append(prevs, prev)
	}
	// The ring without this node names who else may hold a key's state:
	// for a node that just joined, its own ring history says nothing of
	// who held the keys, and with bounded loads keys also move between
	// old members.
	if next != nil && next.Len() > 1 && next.Has(self) {
		var rest []string
		for _, n := range next.Members() {
			if n != self {
				rest = append(rest, n)
			}
		}
		if without, err := ring.New(rest, next.Config()); err == nil && (prev == nil || without.Version() != prev.Version()) {
			prevs = append(prevs, without)
		}
	}
	if len(prevs) == 0 {
		m.cur.Store(nil)
		return
	}
	var ownPrev *ring.Ring
	if prev != nil && prev.Has(self) {
		ownPrev = prev
	}
	t := &transition{prevs: prevs, next: next, ownPrev: ownPrev, since: m.rt.Now(), fetched: map[CounterID]*fetchOp{}}
	m.cur.Store(t)
}

// active reports whether a ring change's first-use fetches may be under
// way (ensure then has work to check).
func (m *moves) active() bool { return m.cur.Load() != nil }

// ensure fetches, once per counter and transition, the state of entries
// this node did not own before the last ring change. When no source
// answers it returns an error (matching ErrUnavailable) rather than let
// the call count from nothing; the next call for the counter tries again.
func (m *moves) ensure(ctx context.Context, r *Router, rg *ring.Ring, entries []limiter.Entry) error {
	t := m.cur.Load()
	if t == nil || sabotage.On(sabotage.NoFetch) { // test-only (internal/sabotage): count from nothing
		return nil
	}
	if r.rt.Now().Sub(t.since) > r.cfg.FetchWindow {
		m.cur.CompareAndSwap(t, nil)
		return nil
	}
	type want struct {
		id      CounterID
		sources []string
		// replicas are asked for a copy only (FetchRequest.NoClaim): they
		// hold replicas of the key, not its count.
		replicas []string
	}
	var wants []want
	var waits []*fetchOp
	op := &fetchOp{done: r.rt.NewSignal()}
	t.mu.Lock()
	for i := range entries {
		e := &entries[i]
		id := CounterID{e.Key, e.Limit.Algorithm, e.Limit.Window}
		if other, ok := t.fetched[id]; ok {
			waits = append(waits, other)
			continue
		}
		var sources []string
		add := func(s string) {
			if s == r.self {
				// This node held the key's replica: adopt it now, in case
				// the ring change's adoption has not run yet.
				if st, ok := r.replicas.ExportCounter(e.Key, e.Limit.Algorithm, e.Limit.Window); ok {
					r.engine.Import([]limiter.CounterState{st})
				}
				return
			}
			if slices.Contains(sources, s) {
				return
			}
			if _, reachable := r.cfg.Members.Addr(s); reachable {
				sources = append(sources, s)
			} else {
				r.traceEvent(e.Key, "skip fetch: "+s+" unreachable")
			}
		}
		if x, ok := r.custody.CountedBy(e.Key); ok {
			// Another node counted the key for this one before the change
			// (given, or held): ask it whatever the rings say.
			add(x)
		}
		// A key this node counted before the change needs no other source:
		// the state is here already (a source could only be unreachable).
		ownedBefore := false
		if t.ownPrev != nil {
			o, err := t.ownPrev.Owner(e.Key)
			ownedBefore = err == nil && o == r.self
		}
		for _, prev := range t.prevs {
			if ownedBefore {
				break
			}
			prevOwner, err := prev.Owner(e.Key)
			if err != nil || prevOwner == r.self {
				continue
			}
			add(prevOwner)
			if !rg.Has(prevOwner) && r.cfg.Replication > 0 {
				// The previous owner is gone: its replicas hold the state.
				succ, _ := prev.Successors(e.Key, r.cfg.Replication+1)
				for _, s := range succ[1:] {
					if rg.Has(s) {
						add(s)
					}
				}
			}
		}
		var replicas []string
		if t.ownPrev == nil && !ownedBefore && r.cfg.Replication > 0 {
			// This node was on no ring of its own before: it just started.
			// It may be back from a crash the others never saw (no ring
			// changed anywhere, nobody adopted its keys): the state it
			// counted then lives on in the replicas at its successors. They
			// are asked for a copy, not to give the key up (they do not
			// count it; one that does answers "held").
			if succ, err := rg.Successors(e.Key, r.cfg.Replication+1); err == nil {
				for _, s := range succ[1:] {
					if _, reachable := r.cfg.Members.Addr(s); reachable && s != r.self && !slices.Contains(sources, s) {
						replicas = append(replicas, s)
					}
				}
			}
		}
		if len(sources) == 0 && len(replicas) == 0 {
			continue // nobody to ask: this node's own state is all there is
		}
		if len(t.fetched) >= maxFetched {
			clear(t.fetched)
		}
		t.fetched[id] = op
		wants = append(wants, want{id, sources, replicas})
	}
	t.mu.Unlock()
	if len(wants) > 0 {
		byPeer := map[string][]CounterID{}
		copies := map[string][]CounterID{}
		for _, w := range wants {
			for _, src := range w.sources {
				byPeer[src] = append(byPeer[src], w.id)
			}
			for _, src := range w.replicas {
				copies[src] = append(copies[src], w.id)
			}
		}
		var held []string
		held, op.err = m.fetch(ctx, r, rg, byPeer, copies)
		if op.err != nil || len(held) > 0 {
			// Failed: the next call tries again. Held elsewhere: the
			// next call after that node gives the key up asks again.
			isHeld := map[string]bool{}
			for _, k := range held {
				isHeld[k] = true
			}
			t.mu.Lock()
			for _, w := range wants {
				if t.fetched[w.id] == op && (op.err != nil || isHeld[w.id.Key]) {
					delete(t.fetched, w.id)
				}
			}
			t.mu.Unlock()
		}
		op.done.Fire()
		if op.err != nil {
			return op.err
		}
	}
	for _, w := range waits {
		if err := w.done.Wait(ctx); err != nil {
			return err
		}
		if w.err != nil {
			return w.err
		}
	}
	return nil
}

// fetch asks each source for its counters and imports what comes back. It
// fails only when no source answered.
func (m *moves) fetch(ctx context.Context, r *Router, rg *ring.Ring, byPeer, copies map[string][]CounterID) (held []string, err error) {
	var heldMu sync.Mutex
	var answers []heldAnswer
	claimed := map[string]bool{} // peers that answered a claim: they gave up what they did not name held
	asked := r.rt.Now()
	fctx, cancel := r.rt.WithTimeout(ctx, r.cfg.FetchTimeout)
	defer cancel()
	g := newGroup(r.rt)
	var answered atomic.Int64
	var errMu sync.Mutex
	var errs []error
	type ask struct {
		name     string
		counters []CounterID
		copy     bool
	}
	var asks []ask
	for _, name := range sortedKeys(byPeer) {
		asks = append(asks, ask{name, byPeer[name], false})
	}
	for _, name := range sortedKeys(copies) {
		asks = append(asks, ask{name, copies[name], true})
	}
	for _, a := range asks {
		name, counters := a.name, a.counters
		g.Go(func() {
			// A member that left may be gone already: a refused connection
			// should fail at once, not wait for a node that will not come back.
			left := r.left(name)
			resp, err := r.peers.Fetch(fctx, name, FetchRequest{Counters: counters, From: r.self, FromAddr: r.cfg.SelfAddr, FailFast: left, NoClaim: a.copy})
			if err != nil && left && errors.Is(err, ErrUnavailable) {
				for _, c := range counters {
					r.traceEvent(c.Key, "fetch: "+name+" left and is gone; its hand-off was all it had")
				}
				answered.Add(1)
				return
			}
			if err == nil {
				states := r.validStates(resp.States, name)
				for _, c := range counters {
					r.traceEvent(c.Key, fmt.Sprintf("fetched from %s: %d states", name, len(states)))
				}
				r.engine.Import(states)
				heldMu.Lock()
				if !a.copy {
					claimed[name] = true
				}
				for _, h := range resp.Held {
					if h.Holder != r.self && h.Holder != "" {
						answers = append(answers, heldAnswer{key: h.Key, holder: h.Holder, source: name})
					}
				}
				heldMu.Unlock()
				r.stats.Fetched.Add(int64(len(states)))
				answered.Add(1)
				return
			}
			r.stats.FetchSourceErrors.Add(1)
			errMu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			errMu.Unlock()
		})
	}
	g.Wait()
	if answered.Load() == 0 && len(errs) > 0 {
		r.stats.FetchErrors.Add(1)
		return nil, fmt.Errorf("%w: could not fetch the state of a moved key: %w", ErrUnavailable, errors.Join(errs...))
	}
	// A key counted elsewhere: pass calls for it on rather than count it
	// here too, until that node's ring moves it here (its hand-off ends
	// this) or this node's ring changes. Not when the named holder is off
	// this node's ring (it is leaving), nor when the holder was asked too
	// and gave the key up: a third node's record of where it sent the key
	// is older than the holder's own answer.
	selfHeld := map[[2]string]bool{}
	for _, a := range answers {
		if a.holder == a.source {
			selfHeld[[2]string{a.key, a.source}] = true
		}
	}
	// wasAsked: peer answered the claim of key itself. Only then does its
	// silence mean it gave the key up; a peer that did not answer (its
	// reply lost) leaves the others' word that it holds the key standing.
	wasAsked := func(peer, key string) bool {
		if !claimed[peer] {
			return false
		}
		for _, c := range byPeer[peer] {
			if c.Key == key {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	for _, a := range answers {
		// Nor when the holder's hand-off of the key arrived while the
		// question was out: the answer predates it.
		self := selfHeld[[2]string{a.key, a.holder}]
		// A holder off this node's ring counts only when it said so itself:
		// it answered, so it is not gone, and a node that leaves gives
		// its keys up rather than keep them.
		if seen[a.key] || (!rg.Has(a.holder) && !self) || (wasAsked(a.holder, a.key) && !self) ||
			r.custody.ReceivedSince(a.key, a.holder, asked) {
			r.traceEvent(a.key, "ignored: held by "+a.holder+" (asked "+a.source+")")
			continue
		}
		seen[a.key] = true
		r.custody.Give(a.key, a.holder)
		r.stats.FetchHeld.Add(1)
		r.traceEvent(a.key, "held by "+a.holder+" (asked "+a.source+")")
		held = append(held, a.key)
	}
	return held, nil
}

// left reports whether the member left the cluster gracefully (see
// LeftReporter).
func (r *Router) left(name string) bool {
	lr, ok := r.cfg.Members.(LeftReporter)
	return ok && lr.Left(name)
}

// heldAnswer is one source's answer that a key is counted by holder.
type heldAnswer struct{ key, holder, source string }

// RingChanged reacts to a membership change: adopt replicated state of
// keys this node now owns, hand off state of keys it no longer owns, and
// replicate owned keys to their (possibly new) successors.
func (r *Router) RingChanged(prev, next *ring.Ring) {
	r.lastChange.Store(r.rt.Now().UnixNano())
	if f := r.trace.Load(); f != nil && *f != nil && next != nil {
		pv := uint64(0)
		if prev != nil {
			pv = prev.Version()
		}
		(*f)("", fmt.Sprintf("ring change %04x -> %04x %v", pv&0xffff, next.Version()&0xffff, next.Members()), next.Version())
	}
	if prev != nil && next != nil {
		for _, m := range next.Members() {
			if !prev.Has(m) {
				r.peers.Rejoined(m)
			}
		}
	}
	if next == nil {
		r.moves.begin(r.self, prev, nil)
		r.custody.NewRing(nil, false)
		return
	}
	// Ownership follows the ring calls are routed by, which is not always
	// the ring of live members: a node without a majority routes by every
	// member it knows, so members it can no longer reach change nothing
	// it owns — no transition, no fetches, no hand-off.
	route := next
	if rr, ok := r.cfg.Members.(RouteRing); ok {
		route = rr.Route(next)
	}
	prevRoute := r.routing.Load()
	if prevRoute == nil {
		prevRoute = prev
	}
	if prevRoute != nil && prevRoute.Version() == route.Version() && r.routing.Load() != nil {
		return
	}
	r.moves.begin(r.self, prevRoute, route)
	r.routing.Store(route)
	r.routed.Fire()
	// Only now that calls route by the new ring: a key given away on a
	// fetch must not look like ours again, even for a moment. A key the
	// new ring gives this node that another node was counting for it is
	// asked of that node on first use (it gives it up or keeps it) — even
	// when that node is off the new ring: one leaving still answers until
	// it has handed off (one that is gone is skipped as unreachable).
	r.custody.NewRing(func(key string) bool {
		o, err := route.Owner(key)
		return err == nil && o == r.self
	}, r.moves.active())
	if prevRoute != nil {
		// Keys whose owner is gone live on in their replicas. This node
		// adopts those it now owns, and hands the others to their new
		// owners with its hand-off (with bounded loads the new owner is
		// not always the replica holder).
		orphaned := func(key string) bool {
			o, err := prevRoute.Owner(key)
			return err == nil && o != r.self && !route.Has(o)
		}
		// Copy first, then drop: a fetch in between must find the state in
		// the engine or the replicas, never in neither.
		orphans := r.replicas.Export(orphaned, false)
		r.engine.Import(orphans) // ours stay; the rest leave with handOff below
		for _, c := range orphans {
			r.replicas.Delete(c.Key, c.Algorithm, c.Window)
		}
		if len(orphans) > 0 {
			r.stats.Adopted.Add(int64(len(orphans)))
			r.log.Info("ringlimit: adopted replicated state of a departed owner", "counters", len(orphans))
		}
	}
	r.handOff(route, true)
	r.repl.markAll(route)
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
	// Under the epoch lock: decisions made under an older ring have
	// finished, and a fetch never finds the state in neither the engine
	// nor the outbox.
	var states []limiter.CounterState
	r.exclusive(func() {
		states = r.engine.Export(notOurs, true)
		if sabotage.On(sabotage.HandOff) {
			states = nil // test-only (internal/sabotage): the state is lost
		}
		r.outbox.Import(states)
	})
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
	sent := 0
	g := newGroup(r.rt)
	var mu sync.Mutex
	for _, owner := range sortedKeys(byOwner) {
		cs := byOwner[owner]
		g.Go(func() {
			ok := true
			for i := 0; i == 0 || i < len(cs); i += maxStatesPerRPC {
				chunk := cs[i:min(len(cs), i+maxStatesPerRPC)]
				final := i+maxStatesPerRPC >= len(cs)
				if err := r.sendStates(owner, chunk, true, final, rg.Version()); err != nil {
					r.log.Warn("ringlimit: hand-off failed; keeping the state for a retry", "owner", owner, "counters", len(cs)-i, "err", err)
					r.strays.Store(true)
					ok = false
					break
				}
			}
			if ok {
				for _, c := range cs {
					r.custody.Handed(c.Key, owner)
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
	g.Wait()
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
// holds for the counters: its engine, its outbox and its replicas. When
// the asker (from) claims the counters as their new owner, this node gives
// up what its engine held and passes later calls for those keys on to it,
// so the two never count a key at once while their rings disagree —
// unless this node counts the key itself by its own ring, or gave it to
// another node: then it keeps it and names the holder (held), and the
// asker passes its calls on to the holder instead. Of two nodes whose
// rings disagree, the one already counting a key keeps it until its own
// ring moves it on (its hand-off then brings the state to the asker).
func (r *Router) fetch(counters []CounterID, from string, noClaim bool) (out []limiter.CounterState, held []Held) {
	// Exclusive with local decisions: those that started before the keys
	// were marked moved have recorded; later ones pass the calls on.
	r.exclusive(func() { out, held = r.giveUp(counters, from, noClaim) })
	return out, held
}

// giveUp is fetch's body, under the epoch lock. With noClaim the asker
// wants a copy: nothing is given up, but keys this node counts (or knows
// another node holds) are still answered "held".
func (r *Router) giveUp(counters []CounterID, from string, noClaim bool) ([]limiter.CounterState, []Held) {
	asking := from != "" && from != r.self
	claim := asking && !noClaim
	leaving := r.shuttingDown()
	rg := r.ring()
	var out []limiter.CounterState
	var held []Held
	heldKeys := map[string]bool{}
	for _, c := range counters {
		key, alg, w := c.Key, c.Algorithm, c.Window
		give := claim
		if handed, ok := r.custody.HandedTo(key); asking && leaving && ok && handed != from {
			// A leaving node's drain delivered the key to another node:
			// name it, so an asker whose ring still lacks that node does
			// not count the key from nothing.
			if !heldKeys[key] {
				heldKeys[key] = true
				held = append(held, Held{Key: key, Holder: handed})
			}
			r.traceEvent(key, "fetch by "+from+": handed to "+handed)
			continue
		}
		if asking && !leaving {
			holder := ""
			mine := false
			if o, err := rg.Owner(key); err == nil && o == r.self {
				mine = true
			}
			switch to, ok := r.custody.GivenTo(key); {
			case ok && to != from:
				holder = to
			case ok:
				// This node gave the key to the asker, which holds its
				// state and counts it: it is not held here (and stays
				// given), whatever this node's ring says.
			case !ok && mine:
				holder = r.self
			}
			if holder != "" {
				give = false
				if !heldKeys[key] {
					heldKeys[key] = true
					held = append(held, Held{Key: key, Holder: holder})
				}
				r.traceEvent(key, "fetch by "+from+": kept for "+holder)
				continue
			}
		}
		if give {
			r.custody.Give(key, from)
			if st, ok := r.engine.TakeCounter(key, alg, w); ok {
				out = append(out, st)
			}
		} else if st, ok := r.engine.ExportCounter(key, alg, w); ok {
			out = append(out, st)
		}
		for _, m := range []*limiter.Memory{r.outbox, r.replicas} {
			if st, ok := m.ExportCounter(key, alg, w); ok {
				out = append(out, st)
			}
		}
	}
	if sabotage.On(sabotage.HandOff) {
		out = nil // test-only (internal/sabotage): the asker starts empty
	}
	return out, held
}

// fetchFrom asks source, once per counter for FetchWindow, for the state of
// entries this node is to count although its own ring does not say it owns
// them: the last hop of a call from source. It returns the node source
// says counts the keys when that is not this node (source kept them, or
// gave them to another): the call goes there rather than count here too.
func (r *Router) fetchFrom(ctx context.Context, source string, entries []limiter.Entry) (holder string) {
	var counters []CounterID
	for i := range entries {
		e := &entries[i]
		h, ask := r.custody.FirstAsk(CounterID{e.Key, e.Limit.Algorithm, e.Limit.Window}, source)
		if !ask {
			if h != "" && holder == "" {
				holder = h
			}
			continue
		}
		counters = append(counters, CounterID{e.Key, e.Limit.Algorithm, e.Limit.Window})
	}
	if len(counters) == 0 {
		return holder
	}
	fctx, cancel := r.rt.WithTimeout(ctx, r.cfg.FetchTimeout)
	defer cancel()
	resp, err := r.peers.Fetch(fctx, source, FetchRequest{Counters: counters, From: r.self, FromAddr: r.cfg.SelfAddr})
	if err != nil {
		r.log.Debug("ringlimit: fetch from the sender of a final call failed", "peer", source, "err", err)
		return holder
	}
	states := r.validStates(resp.States, source)
	r.engine.Import(states)
	r.stats.Fetched.Add(int64(len(states)))
	for _, h := range resp.Held {
		if h.Holder == "" || h.Holder == r.self {
			continue
		}
		for i := range entries {
			if e := &entries[i]; e.Key == h.Key {
				r.custody.AskAnswered(CounterID{e.Key, e.Limit.Algorithm, e.Limit.Window}, source, h.Holder)
			}
		}
		if holder == "" {
			holder = h.Holder
		}
	}
	return holder
}

// sortedKeys returns a map's keys in order: fan-outs start their tasks in
// a stable order, so a simulated history follows from its seed alone.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
