// Package ring is ringlimit's consistent-hash ring: an immutable snapshot
// that maps every key to exactly one owner among a set of members.
//
// A Ring is built once by New from a set of member names (opaque strings,
// usually node names) and never changes afterwards, so it is safe for
// concurrent use without locks; membership changes build a new Ring. The
// placement comes from github.com/buraksezer/consistent (consistent hashing
// with bounded loads, https://research.googleblog.com/2017/04/consistent-hashing-with-bounded-loads.html)
// hashed with xxhash. New turns the library's panics (no hasher, an
// unmeetable load bound) and its empty-ring nil owner into errors.
//
// # Placement
//
// A key is hashed (xxhash64) onto one of Config.PartitionCount partitions;
// each partition has one owner, chosen by the bounded-load algorithm so that
// no member holds more than Config.Load times the average number of
// partitions. Owner is a table lookup: no locks and no allocations.
//
// Successors lists the owner and then the next distinct members, in the
// order of the hashes of their names (the order GetClosestN of
// buraksezer/consistent uses). It is where replicas of a key live.
//
// # Hash tags
//
// As in Redis Cluster, when a key contains "{tag}" with a non-empty tag (the
// first '{' and the first '}' after it), only the tag is hashed. Keys that
// share a tag, such as "{user1}:login" and "{user1}:api", always have the
// same owner, so a batch over them goes to one node. See RoutingKey.
//
// # Versions
//
// Version is a hash of the sorted member set and the ring configuration.
// Two Rings with the same Version place every key identically, whichever
// node built them and in whatever order the members were listed, so nodes
// can compare versions to tell whether they agree on ownership.
//
// The package imports nothing else from ringlimit.
package ring
