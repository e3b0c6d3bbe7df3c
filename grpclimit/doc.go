// Package grpclimit is rate limiting for gRPC servers over any
// limiter.Store, with the choices of package httplimit: a global counter
// per client, per-method (or per-service) rules that replace it, exempt
// methods, keys from the peer address (IPv6 masked to a prefix) or from
// metadata, and policies for a missing key and for store failures.
//
//	lim, err := grpclimit.New(store, grpclimit.Options{
//		Limit:   limiter.Limit{Uses: 100, Window: time.Minute},
//		Methods: []grpclimit.Rule{grpclimit.Exempt("/grpc.health.v1.Health/*")},
//	})
//	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.Unary()), grpc.StreamInterceptor(lim.Stream()))
//
// A refusal is codes.ResourceExhausted carrying an errdetails.RetryInfo
// with the wait; a missing key (under MissingDeny) is
// codes.PermissionDenied; a store failure under Deny is codes.Unavailable
// with the failure's correlation id, logged by fallback.FailureLog. Every
// counted call gets ratelimit-limit, ratelimit-remaining and
// ratelimit-reset header metadata (and retry-after when refused). A
// stream counts once, when it opens. Forwarding headers are not read:
// gRPC proxies that hide the client should pass a key in metadata.
//
// Concurrency(method, n, ttl) (or any rule whose Limit is a
// limiter.Concurrency limit) holds at most n calls of a client in flight:
// a call takes a slot before its handler runs and gives it back when the
// handler returns or panics; a stream holds its slot until it ends. A
// slot whose holder vanished frees itself at its TTL.
//
// Shadow mode (Options.Shadow for every rule, Rule.Shadow for one) counts
// calls as usual but lets every one through: a call over the limit goes
// on with ratelimit-remaining 0 and no retry-after, and is counted in
// Interceptors.ShadowStats and logged, throttled as store failures are
// (see limiter.Shadow). Each rule's limit is named after its Method, the
// global one "default", unless it has a Name: the label of a ringlimit
// node's decision metrics.
package grpclimit
