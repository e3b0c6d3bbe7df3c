// Package postgres is a limiter.Store on PostgreSQL, for services whose
// only shared state is a PostgreSQL database. It keeps the store contract
// of ringlimit (checked by limiter/storetest) with limiter's own
// arithmetic, so it answers exactly as limiter.Memory does on the same
// calls at the same instants.
//
// # How a call runs
//
// By default (Mode OneRoundTrip) ConsumeMany is one statement, one round
// trip: it calls a PL/pgSQL function the store installs with CREATE OR
// REPLACE (part of Schema and Migrate), which in the statement's own
// transaction takes pg_advisory_xact_lock on each distinct counter of the
// batch (a 64-bit hash of key, algorithm and window) in ascending order,
// so two batches can never wait on each other in a cycle; reads
// clock_timestamp() — the database's clock, after the locks (not now(),
// the transaction's start); decides every counter with limiter's
// arithmetic written in SQL (numeric where limiter uses 128-bit
// products); and records. The tests run limiter's vectors through it and
// compare it with limiter.Memory on random call sequences.
//
// Mode TwoRoundTrips runs the same transaction from Go in two pipelined
// round trips: BEGIN, the locks and one SELECT of the rows and the clock;
// then the writes and COMMIT, having decided in Go with limiter's own
// LogState, WindowState and BucketState. Release always runs this way.
// BENCHMARKS.md at the repository root has the measurements that made
// OneRoundTrip the default; AsyncCommit (synchronous_commit off) is the
// larger lever when the disk is slow.
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
