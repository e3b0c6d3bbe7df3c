package owner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// A reset (an operator unlocking a user) forgets counters at the node
// that counts them. It routes like a call, by its own small rule (a pure
// function, resetRule), and is applied where it lands:
//
//  1. A reset made here goes to each key's owner by this node's ring.
//  2. A node that gets one passes a key on, one hop further, while the
//     reset has taken fewer than maxHops forwards and custody says
//     another node counts the key for now (it was given there), or this
//     node's ring gives the key to another node it can call. Otherwise
//     it applies the reset.
//
// Applying it: the node first fetches the named counters as a first call
// would (so a previous owner gives them up), then, under the epoch lock
// held for writing (no decision, hand-off export or fetch answer runs
// meanwhile), records a reset fact in custody, drops the counters from
// its engine, its replicas and its outbox, and marks them for
// replication: a deletion ships as an empty state, so the successors drop
// their replicas too. Every node then drops its cached refusals of the
// keys (Invalidate), and so do their clients' streams.
//
// For FetchWindow after, state of a reset counter that arrives by
// hand-off or in a fetch answer is dropped (custody's reset fact), so a
// late hand-off or a previous owner's copy cannot bring the count back.
// Uses recorded elsewhere after the reset and moved here in that time are
// dropped with it: a reset errs towards admitting.
//
// A reset is idempotent: forgetting a counter that is not held succeeds.

// ResetRequest asks a node to forget counters.
type ResetRequest struct {
	// Keys whose counters go.
	Keys []string
	// Limits name the counters (algorithm and window); none: every
	// counter of each key.
	Limits []limiter.Limit
	// Hops is how many forwards the reset has taken, this one included.
	Hops uint32
}

// resetFact is custody's reset fact of one key.
type resetFact struct {
	at  time.Time
	all bool
	ids []CounterID // the counters reset, unless all
}

// resetRule says where a key's reset is applied, as the node holding it
// sees it: "" here, else the node to pass it to. givenTo is custody's
// given fact ("" for none); owner is the key's owner by the ring;
// ownerKnown says this node can call it.
func resetRule(self string, hops uint32, givenTo, owner string, ownerKnown bool) string {
	if hops == 0 {
		if owner != "" && owner != self {
			return owner
		}
		if givenTo != "" && givenTo != self {
			return givenTo
		}
		return ""
	}
	if hops >= maxHops {
		return ""
	}
	switch {
	case givenTo != "" && givenTo != self:
		return givenTo
	case owner != "" && owner != self && ownerKnown:
		return owner
	}
	return ""
}

var _ limiter.Resetter = (*Router)(nil)

// Reset forgets counters of keys at the nodes counting them (see the
// rule above): with limits, each key's counter of each; without, every
// counter of each key. It returns when every node applied its part, or
// with the errors of those that could not be reached (a caller may
// retry: a reset is idempotent). Without a deadline on ctx it waits at
// most 4 ForwardTimeouts.
func (r *Router) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	if err := r.enter(); err != nil {
		return err
	}
	defer r.exit()
	if err := r.bounds.CheckReset(keys, limits); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		// A reset waits on peers: without a deadline of its caller's, an
		// unreachable owner would hold it for good.
		var cancel context.CancelFunc
		ctx, cancel = r.rt.WithTimeout(ctx, 4*r.cfg.ForwardTimeout)
		defer cancel()
	}
	err := r.routeReset(ctx, ResetRequest{Keys: keys, Limits: limits})
	// This node's own cached refusals go at once, whatever the owners say.
	r.dropRefusals(keys)
	return err
}

// ServeReset applies, or passes on, a reset a peer sent.
func (r *Router) ServeReset(ctx context.Context, req ResetRequest) error {
	if err := r.enter(); err != nil {
		return err
	}
	defer r.exit()
	if err := r.bounds.CheckReset(req.Keys, req.Limits); err != nil {
		return err
	}
	if req.Hops == 0 {
		req.Hops = 1
	}
	return r.routeReset(ctx, req)
}

// routeReset splits a reset by where each key's reset goes, applies this
// node's part and sends the others on.
func (r *Router) routeReset(ctx context.Context, req ResetRequest) error {
	byNode := r.resetTargets(r.ring(), req)
	var mu sync.Mutex
	var errs []error
	g := newGroup(r.rt)
	for _, node := range sortedKeys(byNode) {
		keys := byNode[node]
		g.Go(func() {
			var err error
			if node == r.self {
				err = r.resetHere(ctx, req, keys)
			} else {
				err = r.peers.Reset(ctx, node, ResetRequest{Keys: keys, Limits: req.Limits, Hops: req.Hops + 1})
				if err != nil {
					err = fmt.Errorf("ringlimit: reset at %s: %w", node, err)
				}
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	g.Wait()
	return errors.Join(errs...)
}

// resetTargets groups req's keys by where resetRule sends them (self for
// here).
func (r *Router) resetTargets(rg *ring.Ring, req ResetRequest) map[string][]string {
	out := map[string][]string{}
	for _, key := range req.Keys {
		to := r.resetTarget(rg, key, req.Hops)
		out[to] = append(out[to], key)
	}
	return out
}

func (r *Router) resetTarget(rg *ring.Ring, key string, hops uint32) string {
	owner, err := rg.Owner(key)
	if err != nil {
		owner = r.self // no ring yet: here
	}
	given, _ := r.custody.GivenTo(key)
	known := false
	if owner != r.self {
		_, known = r.cfg.Members.Addr(owner)
	}
	if to := resetRule(r.self, hops, given, owner, known); to != "" {
		return to
	}
	return r.self
}

// resetHere applies the reset of keys on this node (see the rule above).
// A key that a ring change sent elsewhere meanwhile goes on there.
func (r *Router) resetHere(ctx context.Context, req ResetRequest, keys []string) error {
	if rg := r.ring(); len(req.Limits) > 0 {
		// Claim the counters this node owns as a first call would; a fetch
		// that fails leaves the previous owner's copy, which the reset
		// fact drops when it arrives. (A key landing here on a last hop
		// that the ring gives another node is not claimed.)
		var entries []limiter.Entry
		for _, k := range keys {
			if o, err := rg.Owner(k); err != nil || o != r.self {
				continue
			}
			for _, l := range req.Limits {
				entries = append(entries, limiter.Entry{Key: k, Limit: l})
			}
		}
		if len(entries) > 0 {
			if err := r.prepare(ctx, rg, entries); err != nil {
				r.log.Debug("ringlimit: reset: first-use fetch failed", "err", err)
			}
		}
	}
	var gone []limiter.Entry
	var moved map[string][]string
	r.exclusive(func() {
		rg := r.ring()
		here := keys
		if req.Hops < maxHops {
			byNode := r.resetTargets(rg, ResetRequest{Keys: keys, Hops: max(req.Hops, 1)})
			here = byNode[r.self]
			delete(byNode, r.self)
			moved = byNode
		}
		if len(here) == 0 {
			return
		}
		r.custody.Reset(here, req.Limits)
		gone = r.engine.Forget(here, req.Limits)
		r.replicas.Forget(here, req.Limits)
		r.outbox.Forget(here, req.Limits)
		for _, k := range here {
			r.traceEvent(k, "reset")
		}
	})
	if len(gone) > 0 {
		r.repl.mark(r.ring(), gone, true)
	}
	var errs []error
	for _, node := range sortedKeys(moved) {
		if err := r.peers.Reset(ctx, node, ResetRequest{Keys: moved[node], Limits: req.Limits, Hops: max(req.Hops, 1) + 1}); err != nil {
			errs = append(errs, fmt.Errorf("ringlimit: reset at %s: %w", node, err))
		}
	}
	r.invalidateEverywhere(ctx, keys)
	return errors.Join(errs...)
}

// invalidateEverywhere drops cached refusals of keys here, in this node's
// clients' caches, and on every other member (as a release does).
func (r *Router) invalidateEverywhere(ctx context.Context, keys []string) {
	r.dropRefusals(keys)
	ctx, cancel := r.rt.WithTimeout(context.WithoutCancel(ctx), r.cfg.FetchTimeout*4)
	defer cancel()
	g := newGroup(r.rt)
	for _, m := range r.ring().Members() {
		if m == r.self {
			continue
		}
		g.Go(func() { _ = r.peers.Invalidate(ctx, m, keys) })
	}
	g.Wait()
}

// unreset returns states without those of counters reset here lately
// (custody's reset fact): a hand-off from from ("" for a fetch answer)
// or a fetch answer must not bring a reset count back. A hand-off's
// dropped states are still noted as received (the sender gave them up).
func (r *Router) unreset(states []limiter.CounterState, from string) []limiter.CounterState {
	if len(states) == 0 || !r.custody.anyReset() {
		return states
	}
	out := make([]limiter.CounterState, 0, len(states))
	for _, c := range states {
		if !r.custody.WasReset(CounterID{c.Key, c.Algorithm, c.Window}) {
			out = append(out, c)
			continue
		}
		r.traceEvent(c.Key, "reset: dropped a state that arrived after the reset")
		if from != "" {
			r.custody.TakeBack(c.Key, from)
			r.custody.Received(c.Key, from)
		}
	}
	return out
}

// Reset records the reset fact of keys: of the counters limits name, or
// all (no limits). A later reset of all of a key covers any before it.
func (c *custody) Reset(keys []string, limits []limiter.Limit) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.rt.Now()
	for _, k := range keys {
		f := c.facts(k, now)
		if !c.fresh(f.reset.at, now) {
			f.reset = resetFact{}
		}
		f.reset.at = now
		if len(limits) == 0 {
			f.reset.all, f.reset.ids = true, nil
			continue
		}
		if f.reset.all {
			continue
		}
		for _, l := range limits {
			id := CounterID{k, l.Algorithm, l.Window}
			if !slices.Contains(f.reset.ids, id) {
				f.reset.ids = append(f.reset.ids, id)
			}
		}
	}
	c.resets.Store(true)
}

// anyReset reports whether a reset fact was ever recorded (the hot path
// of hand-offs then skips the lock).
func (c *custody) anyReset() bool { return c.resets.Load() }

// WasReset reports whether counter id was reset here within the ttl.
func (c *custody) WasReset(id CounterID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.keys[id.Key]
	if f == nil || !c.fresh(f.reset.at, c.rt.Now()) {
		return false
	}
	return f.reset.all || slices.Contains(f.reset.ids, id)
}
