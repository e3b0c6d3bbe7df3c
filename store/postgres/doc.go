// Package postgres is a limiter.Store on PostgreSQL, for services whose
// only shared state is a PostgreSQL database. It keeps the store contract
// of ringlimit (checked by limiter/storetest) with limiter's own
// arithmetic, so it answers exactly as limiter.Memory does on the same
// calls at the same instants.
//
// # How a call runs
//
// ConsumeMany is one transaction on one pooled connection, in two
// pipelined round trips:
//
//  1. BEGIN; pg_advisory_xact_lock on each distinct counter of the batch
//     (a 64-bit hash of key, algorithm and window), taken in ascending
//     order so two batches can never wait on each other in a cycle; then
//     one SELECT that reads the counters' rows, the sliding logs' uses and
//     clock_timestamp() — the database's clock, read after the locks (not
//     now(), which is the transaction's start).
//  2. The store decides in Go with limiter's pure functions (LogState,
//     WindowState, BucketState), then sends the writes and COMMIT together.
//
// The locks serialise every call on a key, even its first (which has no
// row yet to lock), so of N concurrent calls at the limit exactly one
// passes, and a batch is all or nothing. PeekMany is one statement (one
// snapshot), no lock, one round trip. A deadlock the server breaks (only
// possible with a lock taken outside the store) is retried.
//
// # Schema
//
// The store creates its tables at New (CREATE TABLE IF NOT EXISTS, under
// Config.Table); Schema returns the SQL and Migrate runs it, for users who
// run migrations themselves (then set Config.SkipMigrate). Keys are stored
// as given, as bytea: opaque bytes, NUL and invalid UTF-8 included, up to
// Bounds.MaxKeyBytes (at most 2048 here). Hash them yourself if they hold
// secrets.
//
// # Expiry
//
// A key's expired sliding-log uses are deleted when the key is next used,
// and its row overwritten; Sweep deletes every row whose state is empty by
// the database's clock, and the store runs it every Config.SweepInterval
// (default one minute; negative turns it off).
//
// # Release
//
// Under limiter.WithRelease an allowed verdict carries Release: a sliding
// log deletes exactly its use's row (each has a unique id); a sliding
// window or token bucket gives back its cost as limiter.Memory does, as
// far as it is still counted. Release is idempotent.
//
// # Clock
//
// Every decision, ResetAt and RetryAt is on the database server's clock,
// so any number of hosts share one clock per key.
package postgres
