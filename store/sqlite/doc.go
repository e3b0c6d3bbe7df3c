// Package sqlite is a limiter.Store on an SQLite file, for one host: a
// single process that wants its counts to survive a restart, or several
// processes on one machine sharing limits through one file. It runs on
// modernc.org/sqlite (pure Go, no cgo; driver name "sqlite") and keeps the
// store contract of ringlimit with limiter's own arithmetic, so it answers
// exactly as limiter.Memory does on the same calls at the same instants.
//
// # How a call runs
//
// ConsumeMany is one BEGIN IMMEDIATE transaction (the DSN's
// _txlock=immediate): the write lock is taken before the transaction
// reads, so two processes can never both read the same state and both
// take the last use. Then one SELECT reads the batch's rows, the store
// decides in Go (limiter's LogState, WindowState, BucketState), writes,
// and commits. The database runs in WAL mode, so peeks (one SELECT, no
// lock) do not wait for writers. busy_timeout (Config.BusyTimeout, default
// 5 s) makes a call wait for another process's lock rather than fail. In
// one process the store uses one connection, so its own calls queue in
// database/sql rather than in SQLite's sleeping busy handler.
//
// # Clock
//
// SQLite has no server, so the time is the process's: the wall clock read
// once at New plus the monotonic time elapsed since, which a wall-clock
// step cannot move backwards inside a process. That is acceptable because
// an SQLite file is shared only by processes on one host, which read one
// system clock; processes started on either side of a wall-clock step
// disagree by that step until they restart. (A file on a network file
// system is neither safe for SQLite's locks nor one clock: do not.)
// Config.Clock replaces the clock, e.g. with a limiter.FakeClock in tests.
//
// # Schema, expiry, release
//
// The same shape as package store/postgres, in Config.Table and
// Config.Table+"_log" (Schema, Migrate); keys are BLOBs, stored as given.
// A key's expired uses are deleted when it is next used; Sweep, run every
// Config.SweepInterval (default one minute, negative: off), deletes the
// rest. Under limiter.WithRelease an allowed verdict's Release deletes
// exactly its own sliding-log use, or gives back a window's or bucket's
// cost as limiter.Memory does.
package sqlite
