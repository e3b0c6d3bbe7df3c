package sim

import (
	"context"
	"log/slog"
	"time"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
)

// routerCore adapts owner.Router to Core: the transport calls its Serve
// methods, the membership its RingChanged.
type routerCore struct {
	*owner.Router
}

// NewRouterCore builds the real owner.Router on the simulated runtime,
// transport and membership. A verdict that reaches a caller who left is
// given back (Router.ReleaseAt), as package rpc/peer does.
func NewRouterCore(env Env) (Core, error) {
	r, err := owner.New(owner.Config{
		Self:        env.Name,
		SelfAddr:    env.Name,
		Members:     env.Members,
		Engine:      env.Engine,
		Replicas:    env.Replicas,
		Peers:       env.Peers,
		Runtime:     env.Runtime,
		Replication: env.Replication,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	if env.Leases {
		r.EnableLeases(owner.LeaseConfig{}, nil)
	}
	env.Peers.Late = func(node string, res owner.Result) {
		ctx, cancel := env.Runtime.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = r.ReleaseAt(ctx, node, res.Receipts, env.Runtime.Now().Sub(res.At))
	}
	return routerCore{r}, nil
}

func (c routerCore) Call(ctx context.Context, entries []limiter.Entry, peek bool) (limiter.Verdict, error) {
	return c.Router.Call(ctx, entries, peek)
}

// ServeLease serves a holder's lease traffic (sim/lease.go).
func (c routerCore) ServeLease(ctx context.Context, holder string, rets []leasehold.Return, asks []leasehold.Ask) []leasehold.Grant {
	return c.Router.Lease(ctx, holder, rets, nil, asks)
}

func (c routerCore) ServeFetch(ctx context.Context, req owner.FetchRequest) owner.FetchAnswer {
	return c.Router.ServeFetch(req)
}

func (c routerCore) ServeHandOff(ctx context.Context, b owner.StateBatch) (owner.StateAck, error) {
	return c.Router.ServeHandOff(b)
}

func (c routerCore) ServeReplicate(ctx context.Context, b owner.StateBatch) (owner.StateAck, error) {
	return c.Router.ServeReplicate(b)
}

func (c routerCore) ServeInvalidate(ctx context.Context, keys []string) {
	c.Router.ServeInvalidate(keys)
}
