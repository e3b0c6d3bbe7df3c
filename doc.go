// Package ringlimit is a distributed in-memory rate limiter and cooldown
// counter. Service instances (or a fleet of nodes) form a cluster by
// gossip; a consistent-hash ring makes one node the owner of each key; any
// node forwards a call to the key's owner, which counts it on its own
// monotonic clock. Start embeds a node in a process; Dial is a client of a
// node fleet (package client, which builds without the node's
// dependencies; Dial is its shorthand). Both are limiter.Store, the
// interface every ringlimit store (memory, Redis, PostgreSQL, MySQL,
// SQLite) implements.
package ringlimit
