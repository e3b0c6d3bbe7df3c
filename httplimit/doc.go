// Package httplimit is rate limiting in front of any net/http handler, over
// any limiter.Store: a ringlimit node, a fleet client, Redis, PostgreSQL,
// memory.
//
//	mw, err := httplimit.New(store, httplimit.Options{
//		Limit: limiter.Limit{Uses: 100, Window: time.Minute},
//		Routes: []httplimit.Rule{
//			httplimit.Route("POST /login", limiter.Limit{Uses: 5, Window: 15 * time.Minute}),
//			httplimit.Exempt("GET /healthz"),
//		},
//	})
//	http.ListenAndServe(addr, mw(mux))
//
// Options are validated when the middleware is built: a limit that is not
// positive, a bad window, an IPv6 prefix outside 1..128, an unknown policy
// or a nil store is an *limiter.InputError naming the option, so a mistake
// never silently makes the limit fail open.
//
// # Counters
//
// Requests no Route matches (404s and 405s included) share one global
// counter per client. A Route, matched with net/http ServeMux patterns and
// precedence ("POST /login", "GET /items/{id}"), has its own counter per
// client, named after its pattern, and replaces the global limit for its
// requests. Exempt routes are not counted and get no headers. Limiter.Wrap
// puts one handler behind a counter of its own: a separate layer, so a
// request passing the middleware and a wrapper counts once in each.
//
// # Requests in flight
//
// Concurrency(pattern, n, ttl) (or any rule whose Limit is a
// limiter.Concurrency limit, "concurrency:N/TTL") holds at most n
// requests of a client in flight: a request takes a slot before the
// handler runs and gives it back when the handler returns, also when it
// panics. A refusal is a 429 whose Retry-After is when the oldest slot's
// TTL ends (a slot may free sooner). A slot whose holder vanished frees
// itself at its TTL.
//
// # Keys
//
// The default key is the client IP: IPv4 (and IPv4-mapped IPv6) as it is,
// IPv6 masked to Options.IPv6Prefix bits (default 64) and written as
// network/prefix. X-Forwarded-For (or Forwarded) is read only when the
// peer is in Options.TrustedProxies, and then its right-most untrusted hop
// is the client. HeaderKey and ContextKey build other keys: an API key, or
// the user an authentication middleware put in the context (place the
// limiter after it). A request without a key follows Options.OnMissingKey;
// the first one is logged.
//
// # Answers
//
// An allowed request that was counted carries RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset (seconds, rounded up), or per
// Options.Headers the structured fields of
// draft-ietf-httpapi-ratelimit-headers-11 (RateLimit-Policy and RateLimit)
// or the de-facto X-RateLimit-*. A refusal is 429 Too Many Requests with
// Retry-After (at least 1 s), the same headers with 0 remaining, and an
// RFC 9457 application/problem+json body. Refused requests use no quota.
//
// # Shadow mode
//
// Options.Shadow (every rule) or Rule.Shadow (one route) counts requests
// as usual but serves every one: to try limits before enforcing them. A
// request over the limit gets the headers of a spent quota (0 remaining,
// the reset when it could pass) and no Retry-After; it is counted in
// Limiter.ShadowStats and logged at most once every 10 s with the number
// not logged, as store failures are. What the store records is what
// enforcing records (limiter.Shadow), so switching shadow mode off changes
// no counter. Store failures still follow OnStoreError.
//
// # Names
//
// Each rule's limit is named after the rule (Rule.Name, else its
// pattern; the global rule's Options.Name, "default"), unless the limit
// has a Name of its own: a ringlimit node labels its decision metrics
// with it (ringlimit_decisions_total{limit}).
//
// # Store failures
//
// A store error follows Options.OnStoreError: deny answers 503 (problem+
// json with the failure's correlation id), allow lets the request through
// uncounted. Failures are logged by fallback.FailureLog: the first at
// once, then at most one line every 10 s, and the recovery. A store
// wrapped by fallback.New answers with a policy verdict instead: a refusal
// with Verdict.Failure is a 503, except under fallback.Local, where it is
// a real count and a 429.
package httplimit
