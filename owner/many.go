package owner

import (
	"context"
	"errors"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

var _ limiter.CallsStore = (*Router)(nil)

// Calls decides independent calls together (limiter.CallsStore): the
// calls for keys another node owns go to that owner in one forward, the
// rest each through Call. Answered one by one, a request's calls would
// each lead a forward of their own or wait a round trip behind one (a
// client's Multi through any node: two calls in three are for another
// owner on a 3-node ring). Each call is all or nothing on its own, with
// exactly Call's rules: only the path a call made here takes to its
// owner (hop rule 1, no custody read) is shared, and a call that meets a
// leaving owner is routed again through Call.
func (r *Router) Calls(ctx context.Context, calls []limiter.Call, out []limiter.CallResult) {
	if err := r.enter(); err != nil {
		for i := range out {
			out[i] = limiter.CallResult{Err: err}
		}
		return
	}
	defer r.exit()
	rg := r.ring()
	type group struct {
		owner string
		idx   []int
	}
	var groups []group // few: one per other owner
	var rest, here []int
	// Calls this node counts itself, with nothing to fetch first, are
	// decided together under one epoch lock (decideHere); a release's
	// call keeps Call's path (it wraps the verdict's Release).
	together := !r.moves.active() && !limiter.WantsRelease(ctx)
	for i := range calls {
		c := &calls[i]
		if err := r.bounds.Check(c.Entries); err != nil {
			out[i] = limiter.CallResult{Err: err}
			continue
		}
		f := r.hopFacts(rg, Call{Entries: c.Entries, Peek: c.Peek}, true)
		if f.Owner == r.self && !f.Given && together && !c.Release {
			here = append(here, i)
			continue
		}
		if f.Owner == "" || f.Owner == r.self {
			rest = append(rest, i)
			continue
		}
		j := 0
		for j < len(groups) && groups[j].owner != f.Owner {
			j++
		}
		if j == len(groups) {
			groups = append(groups, group{owner: f.Owner})
		}
		groups[j].idx = append(groups[j].idx, i)
	}
	g := newGroup(r.rt)
	for _, gr := range groups {
		g.Go(func() { r.remoteMany(ctx, gr.owner, calls, gr.idx, out) })
	}
	if len(here) > 0 {
		rest = append(rest, r.decideHere(ctx, rg, calls, here, out)...)
	}
	for _, i := range rest {
		if r.Local(calls[i].Entries) {
			out[i] = r.one(ctx, calls[i]) // microseconds: no task
			continue
		}
		g.Go(func() { out[i] = r.one(ctx, calls[i]) })
	}
	g.Wait()
}

// decideHere decides the calls idx of calls, which this node counts by
// ring rg with no custody fact and nothing to fetch, on its engine under
// one hold of the epoch lock, and marks what they recorded for
// replication at once: Call's countHere path (hop rule 1), without its
// per-call lock, ring reads and replication mark. It returns the calls
// that must take Call's path after all: every one when the ring changed
// since rg, a call whose keys custody now places elsewhere, and a refusal
// while leases are out (Call asks their holders back and decides again;
// a refusal recorded nothing).
func (r *Router) decideHere(ctx context.Context, rg *ring.Ring, calls []limiter.Call, idx []int, out []limiter.CallResult) (again []int) {
	began := r.rt.Now()
	r.epoch.RLock()
	defer r.epoch.RUnlock()
	r.slow(began, "epoch lock", "", calls[idx[0]].Entries[0].Key)
	if r.ring() != rg {
		return idx
	}
	leases := r.leases.Load() != nil
	var buf [32]int
	admitted := buf[:0] // the calls that recorded, for one replication mark
	decided := 0
	for _, i := range idx {
		c := &calls[i]
		if _, moved := r.movedAny(c.Entries); moved {
			again = append(again, i)
			continue
		}
		var v limiter.Verdict
		var err error
		if c.Peek {
			v, err = r.engine.PeekMany(ctx, c.Entries)
		} else {
			v, err = r.engine.ConsumeMany(ctx, c.Entries)
		}
		if err == nil && !c.Peek && !v.Allowed && leases && !c.Entries[0].Debit {
			again = append(again, i)
			continue
		}
		decided++
		out[i] = limiter.CallResult{Verdict: v, Err: err}
		if err == nil && !c.Peek && v.Allowed {
			r.traceAdmit(c.Entries, "local")
			admitted = append(admitted, i)
		}
	}
	r.stats.Local.Add(int64(decided))
	// Under the lock, as Call marks: a hand-off after it ships what this
	// recorded.
	r.repl.markEach(rg, len(admitted), func(k int) []limiter.Entry { return calls[admitted[k]].Entries })
	return again
}

// one answers one call of a Calls through Call.
func (r *Router) one(ctx context.Context, c limiter.Call) limiter.CallResult {
	if c.Release {
		ctx = limiter.WithRelease(ctx)
	}
	v, err := r.Call(ctx, c.Entries, c.Peek)
	return limiter.CallResult{Verdict: v, Err: err}
}

// remoteMany forwards the calls idx of calls to their owner together, as
// remote forwards one.
func (r *Router) remoteMany(ctx context.Context, owner string, calls []limiter.Call, idx []int, out []limiter.CallResult) {
	now := r.engine.Now()
	send := make([]int, 0, len(idx))
	fwd := make([]Call, 0, len(idx))
	for _, i := range idx {
		// All or nothing: one entry the owner refused refuses the batch.
		if v, ok := r.refusals.GetAny(calls[i].Entries, now); ok {
			r.stats.CacheHits.Add(1)
			out[i] = limiter.CallResult{Verdict: v}
			continue
		}
		send = append(send, i)
		fwd = append(fwd, Call{Entries: calls[i].Entries, Peek: calls[i].Peek, NoReceipts: calls[i].Peek || !calls[i].Release})
	}
	if len(send) == 0 {
		return
	}
	began := r.rt.Now()
	results := r.peers.ForwardMany(ctx, owner, fwd)
	r.slow(began, "forward to", owner, fwd[0].Entries[0].Key)
	var again []int
	for j, i := range send {
		c := &calls[i]
		if errors.Is(results[j].Err, ErrShuttingDown) && ctx.Err() == nil {
			// The owner is leaving: Call waits for this node's ring to
			// drop it and routes again.
			again = append(again, i)
			continue
		}
		v, err := r.remoteAnswer(owner, c.Entries, c.Peek, c.Release, now, results[j])
		out[i] = limiter.CallResult{Verdict: v, Err: err}
	}
	if len(again) == 0 {
		return
	}
	g := newGroup(r.rt)
	for _, i := range again {
		g.Go(func() { out[i] = r.one(ctx, calls[i]) })
	}
	g.Wait()
}
