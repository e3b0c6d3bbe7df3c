// Package leasehold is the caller's side of a lease (issue #21): the table
// of leases an embedded node or a fleet client holds, each up to K uses of
// one counter granted by the counter's owner, spent by local decisions
// without a round trip and given back (what was used, as ages on the
// holder's clock; for a token bucket, just the count used) when the lease
// ends, is spent or is recalled. Sliding logs, fixed windows and token
// buckets are leased; sliding windows are not (see owner/lease.go).
//
// The table reads no clock of its own (Config.Now) and starts no task: its
// user asks it when to return (Due) and what to ask for (Want). A Holder
// is a table with that user: it decides calls from the table, sends the
// lease traffic to each owner every tick through a Transport, and answers
// recalls. The fleet client and an embedded node each run one; the
// simulator drives a bare table on its own scheduler.
//
// The lease ends here early by the grant's round trip: its length counts
// from the moment the request was sent, before the owner granted it, so a
// use made here before the local end happened before the owner's end, and
// no clock reading is compared across nodes.
package leasehold
