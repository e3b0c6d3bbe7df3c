package httplimit

import (
	"context"
	"net/http"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Concurrency returns a rule holding at most n requests of a client in
// flight on pattern: a request takes one of the client's n slots before
// the handler runs (or is refused with 429, Retry-After saying when the
// oldest slot's TTL ends at the latest) and gives it back when the
// handler returns, also when it panics. A slot whose holder vanished (a
// crashed process) frees itself ttl after it was taken: make ttl longer
// than the slowest request. The limit is "concurrency:N/TTL"
// (limiter.Concurrency); any Rule, the global Options.Limit and a Wrap
// rule included, whose Limit is a concurrency limit behaves so.
func Concurrency(pattern string, n int64, ttl time.Duration) Rule {
	return Rule{Pattern: pattern, Limit: limiter.ConcurrencyLimit(n, ttl)}
}

// releaseTimeout bounds the give-back of a request's slot after its
// handler returned: the request's own context may be done by then (the
// client went away), and a store that does not answer must not hold the
// handler's goroutine long. A slot not given back frees at its TTL.
const releaseTimeout = 5 * time.Second

// serveHeld runs next holding one of ru's slots for r, and gives it back
// when next returns or panics (the panic goes on).
func (l *Limiter) serveHeld(w http.ResponseWriter, r *http.Request, ru *rule, next http.Handler) {
	var release func(context.Context) error
	if !l.check(w, r, ru, &release) {
		return
	}
	if release != nil {
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), releaseTimeout)
			defer cancel()
			if err := release(ctx); err != nil {
				l.flog.Failure(err)
			}
		}()
	}
	next.ServeHTTP(w, r)
}
