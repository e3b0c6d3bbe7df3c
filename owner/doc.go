// Package owner is a ringlimit node's brain. Its Router is a limiter.Store
// that routes each entry of a call to the local engine (a limiter.Memory)
// or to the key's owner on the consistent-hash ring, and keeps counts
// alive through membership changes:
//
//   - Forwarding: one forwarder per peer with natural batching. When no RPC
//     is in flight a call is sent at once; while one is, calls queue and the
//     next RPC carries the whole queue. No timer sits on the hot path. The
//     caller's deadline travels with each call, and the owner does not count
//     a call whose caller gave up; a verdict that arrives after the caller
//     left is released. A forwarded call goes further only while rings
//     disagree about its key (at most three forwards; see Hand-off).
//   - All or nothing: a batch whose entries have different owners records at
//     each owner and, when any refuses, gives back what the others recorded.
//   - Hand-off: on a ring change the node sends the state of keys it no
//     longer owns to their new owners, as ages (never clock readings); the
//     receiver merges it (a merge that can only count more). Until it has,
//     the new owner asks the previous owner on a key's first use. A node
//     whose own ring still says it owns the key keeps it and answers
//     "held": the asker passes calls on to it until its ring moves the key
//     and its hand-off arrives, so two nodes never count one key at once.
//     Hops between nodes go in RPCs of their own, never queued behind one
//     in flight (that could wait in a cycle).
//   - Replication: each owned key's changes go to its next R successors,
//     batched and asynchronously (a sliding log sends only its calls since
//     the last shipment to a successor that merges such deltas; any other
//     change makes the next shipment whole); when an owner dies its keys'
//     new owners adopt that state (or fetch it from the replica holders under the
//     previous ring on first use, since with bounded loads the new owner is
//     not always the replica holder).
//   - Refusal cache: a refusal from an owner is remembered until its RetryAt,
//     so a hot refused key costs no round trip. It only ever refuses more.
//
// A failed peer is retried with backoff (50 ms doubling to 2 s) rather than
// hammered; what a caller gets when an owner does not answer is decided by
// the fallback package wrapped around the Router.
package owner
