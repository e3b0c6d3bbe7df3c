// Package owner is the cluster protocol's core: which node counts a key
// while rings change, hand-offs move state, replicas adopt keys and calls
// hop. It touches no socket and reads no clock of its own. It reaches the
// other nodes through Peers, an interface it defines in domain types
// (calls, receipts, counter states; package rpc/peer is the gRPC end, and
// package sim delivers in memory), and it reads time, runs tasks and
// waits through a Runtime (RealRuntime in production; the simulator runs a
// whole cluster of cores one task at a time on a virtual clock). Its
// Router is a limiter.Store: a node's brain.
//
// # The path of a call
//
// Router.Call routes a batch made on this node; Router.Serve decides the
// calls a peer forwarded. Both ask one rule where a call is counted
// (hopRule, hop.go) and count under the epoch lock in one place
// (underEpoch): a hand-off takes that lock for writing before it exports
// state (exclusive), so no count made under an older view stays behind.
//
// # The hop rule
//
//  1. A call made here goes to its keys' owner by this node's ring. When
//     that is this node but custody says another node counts the keys for
//     now, it goes there (its first hop). Otherwise it is counted here.
//  2. A forwarded call that is not at its last hop (fewer than maxHops = 3
//     forwards, not final) goes one hop further when custody names where
//     the keys are counted, or when this node's ring gives them to another
//     node it can call; when custody says some of its keys are counted
//     elsewhere but not all at one node, it fails as moving. Otherwise it
//     is counted here.
//  3. A forwarded call whose keys this node's ring gives to several owners
//     is split: each part goes one hop further to its owner, the part this
//     node owns is decided here as a forwarded call; all or nothing.
//  4. A last hop (three forwards, or final) is counted where it lands, with
//     two exceptions that keep a count from staying behind: (a) the node
//     handed the keys to their owner by its ring, lately or right now (it
//     waits for the hand-off under way): the call follows the keys once,
//     as final with a hop count past maxHops, so it is never passed on
//     again; (b) the node's ring does not give it the keys: it first takes
//     their state from the sender, and when the sender names another node
//     as counting them and the call is not final, the call goes there as
//     final.
//
// So a call takes at most four forwards. A batch whose keys have several
// owners is split: each owner records its part, and when any refuses, the
// others' records are given back (all or nothing).
//
// # Custody
//
// The ring says who should own a key; custody (custody.go) says what this
// node did and learned lately, each fact for FetchWindow (10 s): which
// keys it gave to a node that claimed them on a first-use fetch or that
// holds them (calls go there), which it handed off and to whom, which
// hand-offs it received, which counters it asked of whom on a last hop
// and the holder named, which node counted a key for it before the
// last ring change, and which counters an operator reset here. One table,
// one expiry.
//
// # Moving state
//
//   - Hand-off: on a ring change the node sends the state of keys it no
//     longer owns to their new owners, as ages (never clock readings); the
//     receiver merges it (a merge that can only count more). Until it has,
//     the new owner asks the previous owner on a key's first use (Fetch).
//     A node whose own ring still says it owns the key keeps it and
//     answers "held": the asker passes calls on to it until its ring moves
//     the key and its hand-off arrives, so two nodes never count one key
//     at once.
//   - Replication: each owned key's changes go to its next R successors,
//     batched and asynchronously (a sliding log sends only its calls since
//     the last shipment to a successor that merges such deltas); when an
//     owner dies its keys' new owners adopt that state, or fetch it from
//     the replica holders under the previous ring on first use.
//   - Refusal cache: a refusal from an owner is remembered until its
//     RetryAt, so a hot refused key costs no round trip. It only refuses
//     more.
//   - Reset (reset.go): an operator's reset goes to the node counting each
//     key, which forgets the counters under the epoch lock, replicates the
//     deletion as an empty state, has every node drop its cached refusals,
//     and for FetchWindow drops state of the reset counters that arrives
//     late (custody's reset fact).
//
// What a caller gets when an owner does not answer is decided by the
// fallback package wrapped around the Router.
package owner
