// Package limiter is the core of ringlimit: the rules, the verdicts, the
// Store interface every backend implements, the five counting algorithms
// as pure functions, and Memory, the in-memory store.
//
// # Stores
//
// A Store counts uses of keys against limits. Every backend of ringlimit
// is one: Memory (a single process, and the engine inside each cluster
// node), a cluster Node, and the Redis, PostgreSQL, MySQL and SQLite
// adapters. A program is written against Store and changes backend by
// changing one constructor.
//
//	store := limiter.NewMemory(limiter.MemoryConfig{})
//	defer store.Close()
//	login, _ := limiter.ParseLimit("5/15m")
//	v, err := limiter.Consume(ctx, store, "login:"+user, login)
//	if err != nil {
//		return err // bad input (an *InputError), or the store failed
//	}
//	if !v.Allowed {
//		return tooManyRequests(v.RetryAfter)
//	}
//
// A call is a batch of entries, each a key, a Limit and a cost (the uses
// the call takes, 0 meaning 1). ConsumeMany checks and records the whole
// batch in one step; PeekMany answers the same question and records
// nothing. Consume and Peek are shorthands for a batch of one.
//
// # Limits and the five algorithms
//
// A Limit is Uses per Window, counted by an Algorithm. Windows are whole
// milliseconds from 1 ms to MaxWindow (about 292 years); ParseLimit reads
// "5/15m" or "token-bucket:100/1s", ParseDuration reads windows.
//
//   - SlidingLog (the default) is exact: a call passes when fewer than Uses
//     uses lie in the last Window, and a refusal waits until the oldest use
//     leaves it. It keeps every use, so its memory grows with Uses: pick it
//     for logins, cooldowns, password resets, and other small limits where
//     an exact answer matters (Bounds.MaxLogUses caps Uses, default
//     100,000).
//   - SlidingWindow keeps two fixed-window counters aligned to multiples of
//     the window and weights the previous one by how much of it still
//     overlaps the sliding window (rounded up, so it never admits on a
//     rounding). O(1) memory per key; pick it for large per-window quotas
//     ("10,000 requests per hour") where an approximation is fine.
//   - TokenBucket holds Uses tokens refilled at Uses per Window, written as
//     GCRA: one arrival time per key, in exact integer arithmetic. O(1)
//     memory; pick it for API rates that allow a burst ("100/s").
//   - FixedWindow counts Uses per window aligned to the clock: multiples of
//     Window since the Unix epoch ("fixed-window:100/1h" starts on the
//     hour, "1d" at midnight UTC), or, with Limit.Calendar, calendar days,
//     months or years in Limit.Zone ("fixed-window:1000/1mo",
//     "fixed-window:50/1d@Europe/Paris"), with their real lengths
//     (FixedBounds draws them). A refusal waits for the window's end, which
//     is also ResetAt. One end and one count per key: O(1). It is what
//     envoyproxy/ratelimit counts; package rls uses it by default.
//   - Concurrency counts calls in flight ("concurrency:10/30s"): an
//     allowed call holds cost slots until its Verdict.Release, or until
//     Window (the slots' TTL) has passed when its holder vanished. Acquire
//     is the shorthand. The slots are kept as a sliding log's uses (an id,
//     a cost, when taken), apart from any sliding log of the same key;
//     memory grows with Uses (bounded by Bounds.MaxLogUses). See
//     concurrency.go.
//
// Windows are drawn on the store's clock read as Unix time: a Memory's
// clock is the wall clock read when it was made, advanced by the
// monotonic clock, so a wall-clock step never moves a window (the owner's
// clock, in a cluster); an adapter's is its database server's.
//
// The algorithms are pure functions of (state, now, limit, cost) on
// integer microseconds: LogState, WindowState, BucketState and FixedState with their
// Decide and Record methods. Their arithmetic is exact (128-bit where
// needed, never floating point), so the Lua and SQL versions in the
// adapters give the same answers on the same test vectors (package
// storetest, Vectors).
//
// # Bursts
//
// A token bucket's capacity may differ from its rate: Limit.Burst
// ("token-bucket:100/1s,burst=500") holds 500 uses when full, refilled
// at 100 a second. Burst defaults to Uses; only token buckets take one;
// a call may cost up to the burst. The state is the same single arrival
// time: a call passes while it stays within Burst*Window/Uses of now.
//
// # Debits: usage recorded after the fact
//
// Some usage is known only after the work: an LLM gateway learns a
// request's token count from the response. An Entry with Debit set
// records its Cost whatever the budget says, past the limit and above
// Uses (up to Bounds.MaxDebit). Its verdict's Allowed reports whether the
// budget was not already exceeded before the debit; when it was,
// RetryAfter and RetryAt say when one use passes again, counting the
// debit. Later calls are refused until the window has room again: a
// sliding log keeps the debit as one use of its cost, a sliding or fixed
// window counts past Uses, a token bucket goes below zero. A batch is all
// debits or none, and a debit has no Release (the usage happened).
//
// # Verdicts
//
// A Verdict answers a whole batch. Allowed is true when every entry passed;
// the call was then recorded against all of them. Remaining is the uses
// left in the tightest entry. A refusal is a Verdict, not an error: it
// names RetryAfter, the longest wait among the refusing entries (the
// earliest moment the whole batch could pass), and RetryAt, that moment
// on the store's clock in whole milliseconds, the same for every refusal
// inside one wait. A refused call costs no quota. An allowed one names
// ResetAt, when every entry's quota is whole again.
//
// # Names
//
// Limit.Name labels a limit in metrics (a node's
// ringlimit_decisions_total{limit}) and logs. Names come from
// configuration (an httplimit rule's name, an Envoy descriptor's keys),
// never from keys, so the labels stay few; "" is unnamed. A name is not
// part of the counter, which is its key, algorithm and window: limits
// that differ only by name share their counts, and renaming one keeps
// them. CheckName bounds a name (MaxNameBytes of UTF-8).
//
// # Shadow mode
//
// Shadow(store) runs a store in shadow mode, to try a limit before
// enforcing it: every call is asked of the store as usual and let
// through; a call it refused comes back Allowed with Verdict.Shadowed set
// ("would have refused"), is counted (ShadowStore.Stats) and logged at
// most once every 10 s (MsgWouldRefuse, with the number of calls not
// logged). What the store records does not change: as in
// envoyproxy/ratelimit's shadow_mode, the limiter runs as normal and only
// the answer differs, so a call that would be refused records nothing,
// the would-refuse count is what enforcing would refuse, and turning
// shadow mode off changes no counter.
//
// # The contract
//
// Every store keeps the rules of the store contract (DESIGN.md), and the
// conformance suite in package storetest checks each: check and record
// are one step (of N concurrent calls at the limit exactly one passes); a
// batch is all or nothing; a refusal names the longest wait; Peek answers
// what Consume would; one clock per key, the store's own; every key
// expires once its uses have left the window, so memory follows the live
// keys; calls in the same millisecond stay distinct; bad input is refused
// with a typed error that names the field.
//
// # Clocks
//
// Time is an argument of the algorithms and is read once per call by the
// store, never taken from the caller. Memory reads a Clock: by default the
// process clock with its monotonic part, so a wall-clock step never moves
// a window. Tests and examples use a FakeClock and move it by hand.
// Counter state that moves between stores (CounterState, from Export to
// Import) carries ages, not clock readings, so two nodes need no common
// clock.
//
// # Release
//
// A caller that counted a use and then did not do the work (the request
// was cancelled, a later check failed) gives the use back with
// Verdict.Release. It is set on allowed verdicts when the context was made
// with WithRelease (building it costs an allocation the hot path does not
// pay otherwise). It gives back exactly this call's uses, as far as they
// still count: a use that already left its window gives nothing back, and
// a token-bucket release never frees a later call's tokens. It is
// idempotent.
//
// # Reset
//
// An operator unlocks a user with Reset: it forgets each key's counter of
// each limit given (a counter is named by its key, algorithm and window),
// or with no limits every counter of each key. Stores that can implement
// Resetter; Reset on one that cannot returns an *UnsupportedError naming
// it (matching ErrUnsupported), and wrappers pass a reset through. It is
// idempotent.
//
// # Errors
//
// Bad input returns an *InputError whose Field names the offending field
// ("entries[2].limit.window") and which matches ErrInvalid with errors.Is;
// input past a configured bound (key length, batch size, sliding-log uses,
// keys held: see Bounds) also matches ErrBound. A call on a closed store
// returns ErrClosed; a context that is done returns its error; an
// operation a store cannot do returns an *UnsupportedError (ErrUnsupported).
// Stores of
// other packages wrap their failures with %w.
//
// # Memory
//
// NewMemory returns the in-memory store: sharded by key hash, a batch
// atomic across shards (they are locked in one order), expired counters
// dropped by Sweep and by a background sweeper that Close stops, and at
// once by a store at its key bound (Bounds.MaxKeys counts live counters
// only). Len reports the counters held, Live the live ones. A KeyBudget
// lets stores share one key bound (a node's engine and its replicas).
// Export, Import and the Receipt methods serve the cluster: hand-off,
// replication, and releases of forwarded calls; ImportWithin, PutWithin
// and CheckState keep the bounds on state a peer sends.
package limiter
