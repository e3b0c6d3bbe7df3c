// Package fallback decides what a call gets when its store does not
// answer in time: for the cluster's owner, a fleet of nodes, Redis,
// PostgreSQL or any other limiter.Store.
//
// New wraps a store. Each call waits for it at most Config.Timeout
// (default 250 ms); then the Policy decides:
//
//   - Deny refuses the call. The verdict's Failure is set, so an HTTP
//     middleware answers 503 Service Unavailable rather than 429.
//   - Allow lets the call through uncounted (Allowed, with Failure set).
//   - Local counts the call in a process-local limiter.Memory, with each
//     limit divided by the live members (Config.Share), rounded up.
//
// A store that answers with an error is treated the same way, except for
// input errors (limiter.ErrInvalid): those are the caller's fault and are
// returned as they are, never turned into a policy verdict.
//
// # Late verdicts
//
// A call that misses the timeout keeps running for up to Config.LateWait.
// When its answer finally comes and it recorded the call, the count is
// released if the caller did not run (it was refused, or gave up), so a
// caller never loses a use for a call that did not run; under Allow (and
// a Local admission) the call ran, and the late count stays. To be able
// to release, the wrapped store is always called with limiter.WithRelease;
// the caller's verdict carries Release only when it asked for it.
//
// The calls under way on the wrapped store, late ones included, are
// bounded by Config.MaxPending, each holding one goroutine. Past the bound
// the policy decides at once (cause ErrOverloaded), so a stalled store
// cannot pile up goroutines. Close waits for calls and releases under way,
// then closes the wrapped store.
//
// # Failure logs
//
// FailureLog keeps an outage from flooding the log: each failure gets a
// correlation id (it is in FailureError.ID); the first failure of an
// episode is logged at once, then at most one line every 10 s saying how
// many were not logged, and the first success afterwards logs the
// recovery with the number of failures it ended. The httplimit and
// grpclimit middlewares use it for their own store errors.
package fallback
