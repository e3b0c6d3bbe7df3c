// Package cluster is ringlimit's membership: it runs a
// github.com/hashicorp/memberlist node, follows who is alive, and keeps a
// ring.Ring of the live members that the rest of the node routes keys with.
//
// # Lifecycle
//
// Start binds the gossip port, joins the nodes in Config.Join (retrying
// until its context is done) and starts following membership. Leave
// announces the departure so that the others drop this node at once, then
// closes it; Close stops without a word, as a crash would, and the others
// declare the node dead after the failure timeout (about 1 s with the
// "local" profile, 5-7 s with "lan").
//
// # Rings
//
// The ring holds the members that are alive or suspect, by name. Ring is
// one atomic load. Every membership event (join, leave, death, metadata
// update) wakes one goroutine that rebuilds the ring when the set of names
// changed and publishes it to subscribers. memberlist calls its delegates
// synchronously, some under its own lock, and a delegate that blocks
// deadlocks it; so the delegates here only record the event and signal
// without blocking.
//
// Subscribe delivers Changes (Prev, Next) in order. A subscriber that falls
// behind never slows membership: its pending Changes are merged into one
// from the ring it last saw to the newest.
//
// # Partitions
//
// After a network partition heals, memberlist does not merge the two sides
// by itself: each side thinks the other dead and no longer probes it. Every
// RejoinInterval each node therefore joins its Join addresses again
// (resolving DNS names afresh): the full state exchange of a join merges
// the sides.
//
// # Member states
//
// memberlist reports joins and departures but not whether a departed node
// left or died, nor suspicions. Leave therefore first publishes a
// "leaving" flag in the node metadata (State "left" on the others; "dead"
// without it), and a member is "suspect" on this node when this node's own
// probe of it failed (memberlist logs that) until a later probe succeeds
// or it is declared dead.
package cluster
