package sim

import (
	"context"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Core is what the simulator needs of one node's protocol core: the
// calls it routes, the ring changes it follows, the requests peers send
// it, and its life cycle. owner.Router provides it (see NewRouterCore).
type Core interface {
	RingChanger
	Server
	// Call routes one batch (limiter.Store's ConsumeMany/PeekMany).
	Call(ctx context.Context, entries []limiter.Entry, peek bool) (limiter.Verdict, error)
	// Start starts the background work (rebalancing, replication).
	Start()
	// Drain stops taking calls and hands off every owned key.
	Drain(ctx context.Context) error
	// Close stops the background work.
	Close() error
	// ReplicationLag is how long the oldest unshipped change has waited
	// (on the node's clock).
	ReplicationLag() time.Duration
	// SetTrace installs a function told of the core's events per key.
	SetTrace(f func(key, what string, ringVersion uint64))
}

// Env is what a node incarnation's core is built from.
type Env struct {
	Name        string
	Runtime     *Runtime
	Peers       *Peers
	Members     *View
	Engine      *limiter.Memory
	Replicas    *limiter.Memory
	Replication int
	// Leases turns the core's leases on (Options.Leases).
	Leases bool
}

// CoreFactory builds a node's core.
type CoreFactory func(Env) (Core, error)
