package ringlimit

import (
	"context"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
)

// readyGate is the store the node's failure policy wraps: the router,
// reached once the node has joined its cluster. A call made before that
// waits for it at most Timeout and then fails with ErrNotReady, which the
// policy decides as it decides an owner that did not answer (the cooldown
// seed's "a call that would wait longer meets the failure policy"): deny
// refuses with Verdict.Failure set, allow lets it through, local counts
// it in this process. errors.Is(v.Failure, ErrNotReady) tells it apart.
type readyGate struct{ n *Node }

var _ limiter.Store = readyGate{}
var _ limiter.CallsStore = readyGate{}

func (g readyGate) Calls(ctx context.Context, calls []limiter.Call, out []limiter.CallResult) {
	if err := g.n.waitReady(ctx); err != nil {
		for i := range out {
			out[i] = limiter.CallResult{Err: err}
		}
		return
	}
	if g.n.holder == nil {
		g.n.router.Calls(ctx, calls, out)
		return
	}
	// Calls a lease decides here stay out of the batch to the owners. The
	// rest is built only once a lease decided one (most batches: none).
	var rest []limiter.Call
	var at []int
	leased := false
	for i, c := range calls {
		if !c.Peek {
			if v, ok := g.n.leased(ctx, c.Entries); ok {
				out[i] = limiter.CallResult{Verdict: v}
				if !leased {
					leased = true
					rest, at = make([]limiter.Call, 0, len(calls)), make([]int, 0, len(calls))
					rest = append(rest, calls[:i]...)
					for j := range i {
						at = append(at, j)
					}
				}
				continue
			}
		}
		if leased {
			rest, at = append(rest, c), append(at, i)
		}
	}
	if !leased {
		g.n.router.Calls(ctx, calls, out)
		return
	}
	if len(rest) == 0 {
		return
	}
	res := make([]limiter.CallResult, len(rest))
	g.n.router.Calls(ctx, rest, res)
	for j, i := range at {
		out[i] = res[j]
	}
}

func (g readyGate) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	if err := g.n.waitReady(ctx); err != nil {
		return limiter.Verdict{}, err
	}
	if v, ok := g.n.leased(ctx, entries); ok {
		return v, nil
	}
	return g.n.router.ConsumeMany(ctx, entries)
}

func (g readyGate) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	if err := g.n.waitReady(ctx); err != nil {
		return limiter.Verdict{}, err
	}
	return g.n.router.PeekMany(ctx, entries)
}

// notReadyError is ErrNotReady. It matches rpc.ErrUnavailable, so where it
// travels as an error (WaitReady's, or a policy's Failure written by the
// JSON API) it is gRPC Unavailable and HTTP 503, not Internal.
type notReadyError struct{}

func (notReadyError) Error() string { return "ringlimit: node has not joined its cluster yet" }

func (notReadyError) Is(target error) bool { return target == rpc.ErrUnavailable }
