package sim

import (
	"context"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/ring"
)

// toyCore is a naive core for testing the simulator itself: it forwards
// to the owner by its view and hands off on ring changes, with no fetch,
// no replication and no hops, so faults make it overshoot.
type toyCore struct {
	env    Env
	closed bool
}

func newToyCore(env Env) (Core, error) { return &toyCore{env: env}, nil }

func (c *toyCore) Call(ctx context.Context, entries []limiter.Entry, peek bool) (limiter.Verdict, error) {
	rg := c.env.Members.Ring()
	o, err := rg.Owner(entries[0].Key)
	for _, e := range entries[1:] {
		if o2, _ := rg.Owner(e.Key); o2 != o {
			return limiter.Verdict{}, owner.ErrUnavailable // the toy decides no batch across owners
		}
	}
	if err != nil || o == c.env.Name {
		return c.env.Engine.ConsumeMany(ctx, entries)
	}
	res, err := c.env.Peers.Forward(ctx, o, owner.Call{Entries: entries, Peek: peek})
	if err != nil {
		return limiter.Verdict{}, err
	}
	return res.Verdict, res.Err
}

func (c *toyCore) Serve(ctx context.Context, from string, calls []owner.Call) []owner.Result {
	out := make([]owner.Result, len(calls))
	for i, call := range calls {
		out[i].Verdict, out[i].Err = c.env.Engine.ConsumeMany(ctx, call.Entries)
	}
	return out
}

func (c *toyCore) RingChanged(prev, next *ring.Ring) {
	notOurs := func(k string) bool { o, err := next.Owner(k); return err == nil && o != c.env.Name }
	states := c.env.Engine.Export(notOurs, true)
	by := map[string][]limiter.CounterState{}
	var order []string
	for _, s := range states {
		o, _ := next.Owner(s.Key)
		if _, ok := by[o]; !ok {
			order = append(order, o)
		}
		by[o] = append(by[o], s)
	}
	for _, o := range order {
		ctx, cancel := c.env.Runtime.WithTimeout(context.Background(), time.Second)
		_, _ = c.env.Peers.HandOff(ctx, o, owner.StateBatch{From: c.env.Name, States: by[o]})
		cancel()
	}
}

func (c *toyCore) ServeFetch(ctx context.Context, req owner.FetchRequest) owner.FetchAnswer {
	return owner.FetchAnswer{}
}

func (c *toyCore) ServeHandOff(ctx context.Context, b owner.StateBatch) (owner.StateAck, error) {
	c.env.Engine.Import(b.States)
	return owner.StateAck{}, nil
}

func (c *toyCore) ServeReplicate(ctx context.Context, b owner.StateBatch) (owner.StateAck, error) {
	return owner.StateAck{}, nil
}

func (c *toyCore) ServeRelease(ctx context.Context, rs []owner.Receipt, elapsed time.Duration) error {
	return nil
}

func (c *toyCore) ServeInvalidate(ctx context.Context, keys []string) {}

func (c *toyCore) Start() {
	c.env.Runtime.Go(func() {
		for !c.closed {
			if c.env.Runtime.Sleep(context.Background(), 100*time.Millisecond) != nil {
				return
			}
		}
	})
}

func (c *toyCore) Drain(ctx context.Context) error {
	rg := c.env.Members.Ring()
	var rest []string
	for _, m := range rg.Members() {
		if m != c.env.Name {
			rest = append(rest, m)
		}
	}
	if without, err := ring.New(rest, rg.Config()); err == nil {
		c.RingChanged(rg, without)
	}
	return nil
}

func (c *toyCore) Close() error                               { c.closed = true; return nil }
func (c *toyCore) ReplicationLag() time.Duration              { return 0 }
func (c *toyCore) SetTrace(func(key, what string, rv uint64)) {}
