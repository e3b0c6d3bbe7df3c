package owner

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// memNet connects routers in one process: each router's Peers calls the
// others' Serve methods directly, on the caller's goroutine, the way the
// gRPC end (package rpc/peer) does over the wire. States and receipts are
// copied, as the wire would, so no two routers share a slice. A member
// marked down answers nothing: calls to it wait for their context, as a
// gRPC call waiting for a connection that never comes up does.
type memNet struct {
	mu      sync.Mutex
	routers map[string]*Router
	down    map[string]bool
}

func newMemNet() *memNet { return &memNet{routers: map[string]*Router{}, down: map[string]bool{}} }

func (n *memNet) add(name string, r *Router) {
	n.mu.Lock()
	n.routers[name] = r
	n.mu.Unlock()
}

func (n *memNet) setDown(name string, down bool) {
	n.mu.Lock()
	n.down[name] = down
	n.mu.Unlock()
}

// peers returns the Peers of the member called self.
func (n *memNet) peers(self string) Peers { return &memPeers{net: n, self: self} }

type memPeers struct {
	net  *memNet
	self string
}

func (p *memPeers) to(ctx context.Context, node string) (*Router, error) {
	p.net.mu.Lock()
	r, down := p.net.routers[node], p.net.down[node]
	p.net.mu.Unlock()
	if down {
		<-ctx.Done()
		return nil, fmt.Errorf("%w: %s is down: %w", ErrUnavailable, node, ctx.Err())
	}
	if r == nil {
		return nil, fmt.Errorf("%w: no member %q", ErrUnavailable, node)
	}
	return r, nil
}

func (p *memPeers) Forward(ctx context.Context, node string, call Call) (Result, error) {
	r, err := p.to(ctx, node)
	if err != nil {
		return Result{}, err
	}
	if d, ok := ctx.Deadline(); ok {
		call.Timeout = time.Until(d)
		if call.Timeout <= 0 {
			return Result{}, fmt.Errorf("%w: deadline passed before the forward was sent", context.DeadlineExceeded)
		}
	}
	call.Entries = slices.Clone(call.Entries)
	res := r.Serve(ctx, p.self, []Call{call})[0]
	res.Receipts = slices.Clone(res.Receipts)
	res.Verdict.Release = nil // a func does not cross the wire
	if call.NoReceipts {
		res.Receipts = nil // as rpc/peer answers a caller that gives nothing back
	}
	res.At = time.Now()
	return res, nil
}

func (p *memPeers) ForwardMany(ctx context.Context, node string, calls []Call) []Result {
	out := make([]Result, len(calls))
	r, err := p.to(ctx, node)
	if err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	cs := make([]Call, len(calls))
	for i, c := range calls {
		c.Entries = slices.Clone(c.Entries)
		if d, ok := ctx.Deadline(); ok {
			c.Timeout = time.Until(d)
		}
		cs[i] = c
	}
	for i, res := range r.Serve(ctx, p.self, cs) {
		res.Receipts = slices.Clone(res.Receipts)
		res.Verdict.Release = nil
		if cs[i].NoReceipts {
			res.Receipts = nil
		}
		res.At = time.Now()
		out[i] = res
	}
	return out
}

func (p *memPeers) Fetch(ctx context.Context, node string, req FetchRequest) (FetchAnswer, error) {
	r, err := p.to(ctx, node)
	if err != nil {
		return FetchAnswer{}, err
	}
	req.Counters = slices.Clone(req.Counters)
	ans := r.ServeFetch(req)
	ans.States = cloneStates(ans.States)
	return ans, nil
}

func (p *memPeers) HandOff(ctx context.Context, node string, b StateBatch) (StateAck, error) {
	r, err := p.to(ctx, node)
	if err != nil {
		return StateAck{}, err
	}
	b.States = cloneStates(b.States)
	return r.ServeHandOff(b)
}

func (p *memPeers) Replicate(ctx context.Context, node string, b StateBatch) (StateAck, error) {
	r, err := p.to(ctx, node)
	if err != nil {
		return StateAck{}, err
	}
	b.States = cloneStates(b.States)
	return r.ServeReplicate(b)
}

func (p *memPeers) Release(ctx context.Context, node string, rs []Receipt, elapsed time.Duration) error {
	r, err := p.to(ctx, node)
	if err != nil {
		return err
	}
	return r.ServeRelease(ctx, slices.Clone(rs), elapsed)
}

func (p *memPeers) Invalidate(ctx context.Context, node string, keys []string) error {
	r, err := p.to(ctx, node)
	if err != nil {
		return err
	}
	r.ServeInvalidate(slices.Clone(keys))
	return nil
}

func (p *memPeers) Reset(ctx context.Context, node string, req ResetRequest) error {
	r, err := p.to(ctx, node)
	if err != nil {
		return err
	}
	req.Keys, req.Limits = slices.Clone(req.Keys), slices.Clone(req.Limits)
	return r.ServeReset(ctx, req)
}

func (p *memPeers) Rejoined(string) {}

func cloneStates(cs []limiter.CounterState) []limiter.CounterState {
	out := slices.Clone(cs)
	for i := range out {
		out[i].Log = slices.Clone(out[i].Log)
	}
	return out
}
