// Package mysql is a limiter.Store on MySQL 8 or MariaDB 10.6 and later
// (driver github.com/go-sql-driver/mysql), for services whose only shared
// state is such a database. It keeps the store contract of ringlimit
// (checked by limiter/storetest) with limiter's own arithmetic, so it
// answers exactly as limiter.Memory does on the same calls at the same
// instants.
//
// # How a call runs
//
// ConsumeMany is one InnoDB transaction:
//
//  1. START TRANSACTION.
//  2. One INSERT ... ON DUPLICATE KEY UPDATE of every counter's row, in
//     primary-key order: it creates a missing row and takes an exclusive
//     lock on each, so even a key's first call is serialised, and two
//     batches lock in one order. A deadlock InnoDB breaks anyway (gap
//     locks of other writers) is retried.
//  3. One SELECT reads the rows, the sliding logs' uses, and the server's
//     clock (UTC_TIMESTAMP(6), the time this statement started: after the
//     locks; independent of the session's time zone).
//  4. The store decides in Go with limiter's pure functions, writes (one
//     upsert of the counters; for sliding logs one INSERT of the use and,
//     when some expired, one DELETE), and commits.
//
// That is five round trips for a sliding window or token bucket, six or
// seven for a sliding log; PeekMany is one SELECT (one snapshot, no lock).
// Every statement is sent without arguments (values are escaped literals:
// keys as X'hex'), so each is one round trip on the text protocol whatever
// the DSN says.
//
// # Schema, expiry, release
//
// The same shape as package store/postgres, created at New under
// Config.Table (Schema, Migrate, Config.SkipMigrate). Keys are VARBINARY,
// stored as given, up to 2048 bytes. A key's expired uses are deleted when
// it is next used; Sweep, run every Config.SweepInterval (default one
// minute, negative: off), deletes the rest, including the empty lock rows
// a refused batch leaves for keys it did not record. Under
// limiter.WithRelease an allowed verdict's Release deletes exactly its own
// sliding-log use, or gives back a window's or bucket's cost as
// limiter.Memory does. Every time is on the database server's clock.
package mysql
