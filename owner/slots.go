package owner

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// Concurrency slots follow their key.
//
// A concurrency limit's slot is held until its release, which may come
// long after the call was admitted: by then the key may have moved (a
// hand-off after a join or a leave, a successor adopting a crashed
// owner's replica). The slot moved with it, id and all (a CounterState
// carries it like a sliding log's use), but the receipt still names the
// node that recorded it, which holds nothing any more: a release sent
// only there would leave the slot held until its TTL. So a release also
// goes to the key's owner in this node's ring when that is another node.
// Giving a slot back twice is harmless: it is removed by its id, once.

// hasSlots reports whether a batch holds a concurrency limit.
func hasSlots(entries []limiter.Entry) bool {
	for i := range entries {
		if entries[i].Limit.Algorithm == limiter.Concurrency {
			return true
		}
	}
	return false
}

// localSlots is local for a consume with a Release that takes slots: the
// verdict's Release goes through ReleaseAt with receipts, as a forwarded
// call's does, so it finds the slots wherever their key has moved.
func (r *Router) localSlots(ctx context.Context, rg *ring.Ring, entries []limiter.Entry) (limiter.Verdict, error) {
	r.stats.Local.Add(1)
	v, rs, err := r.engine.ConsumeReceipts(limiter.WithRelease(ctx), entries, true)
	if err != nil || !v.Allowed {
		return v, err
	}
	r.traceAdmit(entries, "local")
	r.repl.mark(rg, entries, false)
	v.Release = nil
	if len(rs) > 0 {
		v.Release = r.releaser(r.self, ReceiptsFromEngine(rs, r.self, r.engine.Now()), r.rt.Now())
	}
	return v, nil
}

// followSlots gives the slots among rs back again at their key's owner
// in this node's ring, where that is not the node the release went to
// (groupReceipts: the recording node, else fallback). sent holds the
// error of the release at each of those nodes; the whole fails only for
// receipts neither reached: a slot freed where its key lives now is
// freed, whatever its old owner (crashed, perhaps) answered.
func (r *Router) followSlots(ctx context.Context, rs []Receipt, fallback string, elapsed time.Duration, sent map[string]error) error {
	rg := r.routing.Load()
	type move struct {
		to   string
		from string
	}
	var groups []receiptGroup
	var moves []move
	covered := map[string]bool{} // recording nodes all of whose receipts were followed
	for node := range sent {
		covered[node] = true
	}
	for _, rc := range rs {
		from := rc.Node
		if from == "" {
			from = fallback
		}
		to := ""
		if rc.Limit.Algorithm == limiter.Concurrency && rg != nil {
			if o, err := rg.Owner(rc.Key); err == nil && o != from {
				to = o
			}
		}
		if to == "" {
			covered[from] = false
			continue
		}
		i := len(moves)
		for j, m := range moves {
			if m == (move{to, from}) {
				i = j
				break
			}
		}
		if i == len(moves) {
			moves = append(moves, move{to, from})
			groups = append(groups, receiptGroup{node: to})
		}
		groups[i].receipts = append(groups[i].receipts, rc)
	}
	var errs []error
	for i, g := range groups {
		err := r.releaseOn(ctx, g.node, g.receipts, elapsed)
		from := moves[i].from
		if err != nil {
			covered[from] = false
			if sent[from] != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, node := range sortedKeys(sent) {
		if err := sent[node]; err != nil && !covered[node] {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
