package grpclimit

import (
	"context"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Concurrency returns a rule holding at most n calls of a client in flight
// on a method (or a service, "/pkg.Svc/*"): a call takes one of the
// client's n slots before its handler runs (or fails with
// ResourceExhausted and a RetryInfo saying when the oldest slot's TTL ends
// at the latest) and gives it back when the handler returns, also when it
// panics; a stream holds its slot until it ends. A slot whose holder
// vanished frees itself ttl after it was taken: make ttl longer than the
// slowest call. The limit is "concurrency:N/TTL" (limiter.Concurrency);
// any Rule, the global Options.Limit included, whose Limit is a
// concurrency limit behaves so.
func Concurrency(method string, n int64, ttl time.Duration) Rule {
	return Rule{Method: method, Limit: limiter.ConcurrencyLimit(n, ttl)}
}

// releaseTimeout bounds the give-back of a call's slot after its handler
// returned (its context is done by then when the client went away). A
// slot not given back frees at its TTL.
const releaseTimeout = 5 * time.Second

// giveBack releases a call's slot, logging a failure.
func (in *Interceptors) giveBack(ctx context.Context, release func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := release(ctx); err != nil {
		in.flog.Failure(err)
	}
}
