package owner

import (
	"context"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// EnableLeases turns leases on (issue #21; see lease.go): the node grants
// leases of keys it owns and, before it refuses a call while uses of its
// counters are out on leases, asks their holders back through recall.
// recall may be nil, or fail for a holder it cannot reach (a fleet client
// with no recall stream open, a node cut off): the decision then waits
// for the holders' own returns, which they send when their leases end,
// bounded by LeaseConfig.RecallTimeout. Call it before the node serves.
//
// Lease ids name reservations in the counters' logs, which hand-offs and
// replicas merge by id: a zero cfg.Seed is replaced by one from the node's
// name and its clock at the call, so two nodes, or two lives of one node,
// never number their leases alike.
func (r *Router) EnableLeases(cfg LeaseConfig, recall RecallFunc) {
	if cfg.Seed == 0 {
		cfg.Seed = xxhash.Sum64String(r.self) ^ uint64(r.rt.Now().UnixNano())
	}
	r.leases.Store(newLeases(cfg, r.self, r.rt, r.engine, recall))
}

// LeaseStats returns the node's lease counters (nil when leases are off).
func (r *Router) LeaseStats() *LeaseStats {
	if b := r.leases.Load(); b != nil {
		return &b.stats
	}
	return nil
}

// Lease serves a holder's lease traffic: returns of its leases, releases
// of uses it returned, and asks for new leases (one grant per ask, in
// order; K 0 is none). Only keys this node owns (by its ring, given to no
// other node) are granted. A return or release of a key it does not own
// is dropped: the reservation it would replace counts at least the uses
// made until it leaves the log, so dropping it only counts more.
func (r *Router) Lease(ctx context.Context, holder string, rets []leasehold.Return, rels []leasehold.Release, asks []leasehold.Ask) []leasehold.Grant {
	grants := make([]leasehold.Grant, len(asks))
	for i, a := range asks {
		grants[i] = leasehold.Grant{Owner: r.self, Key: a.Key, Limit: a.Limit}
	}
	b := r.leases.Load()
	if b == nil || r.enter() != nil {
		return grants
	}
	defer r.exit()
	b.expireSometimes(r.cfg.FetchWindow)
	here := func(key string, l limiter.Limit, f func(rg *ring.Ring)) {
		entries := []limiter.Entry{{Key: key, Limit: l}}
		if r.bounds.Check(entries) != nil || !r.Local(entries) || r.prepare(ctx, r.ring(), entries) != nil {
			return
		}
		r.underEpoch(Call{Entries: entries}, true, hopFacts{}, nil, func(rg *ring.Ring) {
			f(rg)
			r.repl.mark(rg, entries, true)
		})
	}
	for _, ret := range rets {
		here(ret.Key, ret.Limit, func(*ring.Ring) { b.settle(ret) })
	}
	for _, rel := range rels {
		if rel.Limit.Algorithm != limiter.SlidingLog {
			continue
		}
		here(rel.Key, rel.Limit, func(*ring.Ring) {
			_ = r.engine.ReleaseReceipts(context.WithoutCancel(ctx), []limiter.Receipt{{Key: rel.Key, Limit: rel.Limit, Cost: max(rel.Cost, 1), ID: rel.ID}})
		})
		r.dropRefusals([]string{rel.Key})
	}
	granted := map[CounterID]bool{}
	for i, a := range asks {
		here(a.Key, a.Limit, func(*ring.Ring) {
			g, err := b.grant(ctx, LeaseRequest{Holder: holder, Key: a.Key, Limit: a.Limit, K: a.K, Length: a.Length})
			if err == nil {
				grants[i] = g
				if g.K > 0 {
					granted[counterOf(a.Key, a.Limit)] = true
				}
			}
		})
	}
	if len(granted) > 0 && r.cfg.Replication > 0 {
		// The reservations reach the replicas before the holder may spend
		// them: an owner that crashes after answering leaves its replica
		// counting every lease it granted, so its leases add nothing to
		// the crash bound (the uses of a lease are made after the grant,
		// not within the replication lag before the crash). A grant whose
		// reservation some replica was not sent is taken back at once and
		// answered as none: it would otherwise add its k to what a crash
		// can over-admit.
		for _, c := range r.shipReservations(b, grants) {
			for i, g := range grants {
				if g.K > 0 && counterOf(g.Key, g.Limit) == c {
					here(g.Key, g.Limit, func(*ring.Ring) {
						b.settle(leasehold.Return{ID: g.ID, Owner: r.self, Key: g.Key, Limit: g.Limit, K: g.K})
					})
					b.stats.Unreplicated.Add(1)
					grants[i] = leasehold.Grant{Owner: r.self, Key: g.Key, Limit: g.Limit}
				}
			}
		}
	}
	return grants
}

// shipReservations sends the successors of each granted counter the
// lease's reservation alone, as a delta (one call added to the log they
// hold), and a fixed window's or a token bucket's state whole (a few
// numbers; a bucket's carries its holds, the floor a new owner must keep). A
// sliding log's whole state can hold thousands of calls: shipping it per
// grant made grants slow enough that leases ran out before their renewals
// came.
//
// It returns the counters whose reservation some successor was not sent.
func (r *Router) shipReservations(b *leases, grants []leasehold.Grant) (failed []CounterID) {
	rg := r.ring()
	now := r.engine.Now()
	byPeer := map[string][]limiter.CounterState{}
	whole := map[CounterID]bool{}
	for _, g := range grants {
		if g.K == 0 {
			continue
		}
		c := counterOf(g.Key, g.Limit)
		if g.Limit.Algorithm != limiter.SlidingLog {
			whole[c] = true
			continue
		}
		end, ok := b.reservationEnd(c, g.ID)
		if !ok {
			continue
		}
		st := limiter.CounterState{Key: g.Key, Algorithm: limiter.SlidingLog, Window: g.Limit.Window, Delta: true,
			Log: []limiter.LogUse{{At: end - now, Cost: g.K, ID: g.ID}}}
		succ, err := rg.Successors(g.Key, r.cfg.Replication+1)
		if err != nil {
			continue
		}
		for _, s := range succ {
			if s != r.self {
				byPeer[s] = append(byPeer[s], st)
			}
		}
	}
	if len(whole) > 0 {
		failed = r.repl.ship(whole)
	}
	g := newGroup(r.rt)
	var mu sync.Mutex
	for _, peer := range sortedKeys(byPeer) {
		states := byPeer[peer]
		g.Go(func() {
			if r.sendStates(peer, states, false, false, rg.Version()) == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, c := range states {
				failed = append(failed, CounterID{c.Key, c.Algorithm, c.Window})
			}
		})
	}
	g.Wait()
	return failed
}

// awaitLeases is called, outside the epoch lock, when the node decided a
// refusal: when uses of the entries' counters are out on leases, it asks
// their holders back (or waits, bounded, for their own returns) and
// reports true: the caller decides again, once. Nothing waits under the
// epoch lock (a hand-off must be able to take it).
func (r *Router) awaitLeases(ctx context.Context, entries []limiter.Entry) bool {
	b := r.leases.Load()
	if b == nil || entries[0].Debit {
		return false
	}
	by := b.outstanding(entries)
	if len(by) == 0 {
		return false
	}
	b.recallFrom(ctx, by)
	// Holders the recall did not reach return their leases when these end
	// (a little before they end here): wait for that, within the bound.
	began := r.rt.Now()
	for {
		end, out := b.latestEnd(entries)
		if !out {
			break
		}
		waited := r.rt.Now().Sub(began)
		left := limiter.MicrosDuration(end-r.engine.Now()) + b.cfg.ReturnSlack
		if waited >= b.cfg.RecallTimeout || left > b.cfg.RecallTimeout-waited {
			break
		}
		if r.rt.Sleep(ctx, min(time.Millisecond, b.cfg.RecallTimeout-waited)) != nil {
			break
		}
	}
	return true
}
