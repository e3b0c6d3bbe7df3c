package sim

import (
	"context"
	"time"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/limiter"
)

// The lease mode (Options.Leases): every node is also a leaseholder for
// the client calls made through it, as an embedded node or a fleet client
// would be. It asks the owner of a key it is called for (by its own ring)
// for a lease over the simulated network, decides single-key calls from
// its leases when it can, and sends back what it used every leaseTick.
// The lease traffic meets the network's faults (delays, losses, resets,
// cuts) like every message; a holder that dies loses its leases (their
// uses stay counted at the owner), an owner that dies leaves its replica
// the reservations. The checker holds the history to the same promises.

// leaseTick is how often a holder sends its lease traffic.
const leaseTick = 2 * time.Millisecond

// leaseServer is a Server that grants leases (routerCore).
type leaseServer interface {
	ServeLease(ctx context.Context, holder string, rets []leasehold.Return, asks []leasehold.Ask) []leasehold.Grant
}

// nodeLeases is one node incarnation's holder side.
type nodeLeases struct {
	tbl  *leasehold.Table
	asks []pendingLeaseAsk
	rets []leasehold.Return // replaced by a new grant, not yet sent
}

type pendingLeaseAsk struct {
	e   limiter.Entry
	ask leasehold.Ask
}

// decide admits e from a lease when it can; it also counts the call
// toward asking for one (every call of a key asks: the plan's keys are
// called a few times a second, far below what makes a key hot).
func (nl *nodeLeases) decide(e limiter.Entry) bool {
	_, ok, k, length, asking := nl.tbl.TakeOrAsk(e, false)
	if asking {
		nl.asks = append(nl.asks, pendingLeaseAsk{e: e, ask: leasehold.Ask{Key: e.Key, Limit: e.Limit, K: k, Length: length}})
	}
	return ok
}

// startLeases gives n a holder table and its sender task.
func (h *harness) startLeases(n *simNode, seed uint64) {
	nl := &nodeLeases{tbl: leasehold.New(leasehold.Config{Now: n.rt.Now, Length: 300 * time.Millisecond, Hot: 1, HotSpan: time.Millisecond, MinK: 1, Seed: seed})}
	n.leases = nl
	rt, view, name := n.rt, n.view, n.name
	n.proc.Go("leases", func() {
		for rt.Sleep(context.Background(), leaseTick) == nil {
			rets := append(nl.tbl.Due(), nl.rets...)
			asks := nl.asks
			nl.asks, nl.rets = nil, nil
			if len(rets) == 0 && len(asks) == 0 {
				continue
			}
			rg := view.Ring()
			type traffic struct {
				rets []leasehold.Return
				asks []pendingLeaseAsk
			}
			by := map[string]*traffic{}
			var order []string
			get := func(key string) *traffic {
				owner, err := rg.Owner(key)
				if err != nil {
					return nil
				}
				t := by[owner]
				if t == nil {
					t = &traffic{}
					by[owner] = t
					order = append(order, owner)
				}
				return t
			}
			for _, r := range rets {
				if t := get(r.Key); t != nil {
					t.rets = append(t.rets, r)
				}
			}
			for _, a := range asks {
				if t := get(a.ask.Key); t != nil {
					t.asks = append(t.asks, a)
				} else {
					nl.tbl.Failed(a.e)
				}
			}
			for _, owner := range order {
				t := by[owner]
				ctx, cancel := rt.WithTimeout(context.Background(), h.plan.Timeout)
				sent := rt.Now()
				asks := make([]leasehold.Ask, len(t.asks))
				for i, a := range t.asks {
					asks[i] = a.ask
				}
				v, err := h.net.call(ctx, rt, name, owner, "lease", false, func(ctx context.Context, srv Server) (any, error) {
					ls, ok := srv.(leaseServer)
					if !ok {
						return []leasehold.Grant(nil), nil
					}
					return ls.ServeLease(ctx, name, cloneReturns(t.rets), asks), nil
				}, nil)
				cancel()
				var gs []leasehold.Grant
				if err == nil {
					gs = v.([]leasehold.Grant)
				}
				for i, a := range t.asks {
					if i < len(gs) && gs[i].K > 0 {
						if old, ok := nl.tbl.Install(sent, gs[i]); ok {
							nl.rets = append(nl.rets, old) // replaced: back at the next tick
						}
						continue
					}
					nl.tbl.Failed(a.e)
				}
			}
		}
	})
}

func cloneReturns(rs []leasehold.Return) []leasehold.Return {
	out := make([]leasehold.Return, len(rs))
	for i, r := range rs {
		out[i] = r
		out[i].Uses = append([]leasehold.Use(nil), r.Uses...)
	}
	return out
}
