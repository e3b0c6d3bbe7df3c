package ringlimit

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc/api"
)

// Leases (issue #21) on a node: it grants leases of the keys it owns
// (owner.Router.Lease, to fleet clients over Limiter.Lease and to peers
// over Peer.Lease), and it holds leases of hot keys its peers own, so an
// embedded node decides them in its own process (n.holder, used by
// readyGate). Before it refuses a key whose uses are out on leases, the
// owner recalls them (recallLeases): from a fleet client over the
// LeaseRecalls stream the client keeps open, from a node over Peer.Recall.

// nodeLeaseLength is the lease length a node asks for (as the fleet
// client's): within owner.LeaseConfig.RecallTimeout, so an owner that
// cannot reach the holder waits for the lease's end at most that long.
const nodeLeaseLength = 200 * time.Millisecond

// Lease serves a holder's lease traffic (api.Leaser; see owner.Router.Lease).
func (a apiNode) Lease(ctx context.Context, holder string, rets []leasehold.Return, rels []leasehold.Release, asks []leasehold.Ask) []leasehold.Grant {
	return a.router.Lease(ctx, holder, rets, rels, asks)
}

// startHolder makes the node a leaseholder of its peers' hot keys.
func (n *Node) startHolder() {
	n.holder = leasehold.NewHolder(leasehold.HolderConfig{
		Name:      n.cfg.Name,
		Table:     leasehold.Config{Now: time.Now, Length: nodeLeaseLength, Seed: uint64(time.Now().UnixNano())},
		Transport: nodeTransport{n},
		Timeout:   n.cfg.Timeout,
	})
	n.peerSrv.SetRecaller(n.holder)
}

// leased decides a call from a lease when the node holds one for it (a
// single-entry consume of a key another node owns).
func (n *Node) leased(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, bool) {
	if n.holder == nil || len(entries) != 1 || !leasehold.Leasable(entries[0]) {
		return limiter.Verdict{}, false
	}
	if o, err := n.router.RoutingRing().Owner(entries[0].Key); err != nil || o == n.cfg.Name {
		return limiter.Verdict{}, false // its own keys it counts itself
	}
	return n.holder.Decide(ctx, entries)
}

// recallLeases asks a holder for leases back (owner.RecallFunc).
func (n *Node) recallLeases(ctx context.Context, holder string, ids []uint64) ([]leasehold.Return, error) {
	rets, err := n.api.Recall(ctx, holder, ids)
	if !errors.Is(err, api.ErrNoRecallStream) {
		return rets, err // a fleet client, over its recall stream
	}
	if holder == n.cfg.Name {
		if n.holder == nil {
			return nil, nil
		}
		return n.holder.Recall(ids), nil
	}
	return n.peers.Recall(ctx, holder, ids)
}

// nodeTransport carries the node's lease traffic to the keys' owners.
type nodeTransport struct{ n *Node }

func (t nodeTransport) Owner(key string) (string, bool) {
	o, err := t.n.router.RoutingRing().Owner(key)
	return o, err == nil
}

func (t nodeTransport) Exchange(ctx context.Context, owner string, tr leasehold.Traffic) ([]leasehold.Grant, error) {
	if owner == t.n.cfg.Name {
		// The ring gave this node a key it held a lease of: the lease's
		// return (and the reservation, which came with the state) are here.
		return t.n.router.Lease(ctx, tr.Holder, tr.Returns, tr.Releases, tr.Asks), nil
	}
	return t.n.peers.Lease(ctx, owner, tr)
}
