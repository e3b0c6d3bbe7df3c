// Package redis is a limiter.Store over Redis (or any server that runs
// Redis Lua scripts: Valkey, KeyDB), for teams that would rather not run
// a ringlimit cluster and already run Redis. It passes the same
// conformance suite (limiter/storetest) as every other store.
//
// # Servers
//
// The script calls only TIME and sorted-set, hash and PEXPIRE commands
// that Redis 5 has, and writes after reading TIME, which needs the
// effects replication Redis 5 made the default. So the same script runs
// on Redis 5 and later, Valkey, KeyDB, Dragonfly and Upstash. Garnet runs
// Lua only in part: check it (storetest.Run against a Store on it) before
// relying on it. This project's tests run on Redis 7; Debian 12, its test
// machine, ships no Valkey, KeyDB or Dragonfly.
//
// # Use
//
// The store depends on no Redis client: it takes a function that runs a
// script (Config.Eval) and, optionally, one that runs it by SHA1
// (Config.EvalSHA). GoRedis fills both for a go-redis client, single node
// or cluster; Open parses a URL, makes a go-redis client fit for a rate
// limiter, connects, and owns the client:
//
//	s, err := redis.Open("rediss://ratelimit:pw@redis.internal:6380/0", redis.Config{
//		Secret:     secret,     // 32+ random bytes, the same on every instance
//		RequireTLS: true,
//	})
//	v, err := limiter.Consume(ctx, s, clientIP, limiter.Limit{Uses: 5, Window: 15 * time.Minute})
//
// Open and ParseURL take redis://, rediss:// (TLS), valkey://, valkeys://
// (the same, for Valkey) and unix:// URLs. Given "", they read REDIS_URL,
// else VALKEY_URL. Open connects before it returns, within the dial
// timeout (Config.Timeout, but at least 1 s), so a wrong address, port or
// password fails at start, with an error matching ErrUnavailable, not at
// the first call.
//
// # One round trip per call
//
// One Lua script checks every entry of a batch and, only when all pass,
// records them, for all five algorithms, timed by the server's TIME: so
// whether a call passes never depends on the callers' clocks, and a
// refused batch records nothing. With EvalSHA the script is sent by its
// SHA1 and in full only when the server answers NOSCRIPT (after a restart
// or SCRIPT FLUSH). The script reads each counter's state and decides;
// the Go side then computes Remaining, RetryAfter and ResetAt from that
// same state with package limiter's own functions, and fails the call if
// the two ever disagree. The common call, one sliding-log entry of cost
// 1, takes the script's short form: the log trimmed, counted, added to
// and expired, and a reply of one integer when the call passes. A
// concurrency limit's slots are a sliding log's uses under a key of their
// own (tag "cc"): members scored by when they were taken, removed by their
// id on release and by the log's trim when their TTL ends.
//
// # Keys
//
//	<Prefix><alg>:<window ms>:<hash>           e.g. ringlimit:log:900000:5f0c…
//	<Prefix>{<HashTag>}:<alg>:<window ms>:<hash>
//
// Prefix (default "ringlimit:") keeps applications apart on one server.
// The algorithm and window are part of the key, so changing a rule's
// window starts fresh counters. Keys are hashed by default: the first 128
// bits of HMAC-SHA256(Secret, key) in hex (HashKey computes it). Without a
// Secret they are plain SHA-256, and New logs a warning: a plain hash of
// an IP address does not hide it. HashNone writes keys as they are.
// Every key gets a PEXPIRE, so nothing outlives its window: the sliding
// log's sorted set (one member per use, scored by its µs, so Release
// removes exactly its own call) lives Window+1 ms after its last use, a
// sliding window's hash until its counter stops weighing (2 windows), a
// token bucket's hash until its arrival time has passed (or, once a
// release lowered it, until the moves record the hash then also holds is
// of no more use: limiter.BucketMoves; a hash written before the record
// existed has none, and counts as before), a fixed window's hash (its
// window's end in ms and its count) until that end.
//
// A calendar fixed window (limiter.Limit.Calendar) needs zone rules Lua
// does not have: the store sends the boundaries around its own clock
// (limiter.CalendarEnds), the server's clock picks its window among them,
// and a server clock a whole window ahead of the client's fails the call
// rather than guess.
//
// # Redis Cluster
//
// One script can only reach keys of one slot, and a call's keys usually
// sit in different slots. With Config.Cluster (GoRedis sets it for a
// *goredis.ClusterClient) and no HashTag, each key is counted by a script
// of its own, in order; after a refusal the rest are only peeked (for the
// longest wait) and the uses counted before it are given back. So a
// refused call counts against none, unless a give-back fails (the
// connection drops between the two scripts): that use then stays counted
// until it leaves its window, and the failure is logged at Error level.
// Such a batch is not atomic either: two concurrent batches over the same
// keys can both be refused where one alone would pass (never both
// admitted). HashTag puts all of a store's keys in one slot, so a batch
// is one atomic script again, at the cost of sending every call to that
// slot's node.
//
// # Failures
//
// Every call is bounded by Config.Timeout (default 1 s). A client made by
// Open or ParseURL does not retry (a retried script could count twice),
// dials once, and times out reads and writes at Timeout (dials at
// Timeout but at least 1 s, within the call's own deadline), so while
// Redis is down each call fails within the timeout with an error matching
// ErrUnavailable, which the fallback wrapper turns into its policy. A
// go-redis cluster client still follows MOVED/ASK redirects (MaxRedirects).
//
// # Security
//
// A redis:// or valkey:// URL to a host that is not loopback sends keys
// and the password in clear: Open and ParseURL log a warning, or refuse it
// with RequireTLS; rediss://, valkeys:// and unix sockets pass. Connect as an ACL user
// limited to the store's keys and the commands its script runs:
//
//	ACL SETUSER ringlimit on >password resetkeys ~ringlimit:* -@all +evalsha +eval +time +zremrangebyscore +zcard +zrange +zadd +zrem +hmget +hset +pexpire
//
// (EVAL and EVALSHA need the commands the script calls to be allowed too;
// with a custom Prefix, change ~ringlimit:*.)
//
// # Exactness
//
// Lua numbers are doubles, exact for integers below 2^53. The script
// therefore keeps times as (milliseconds, microseconds) pairs for the
// sliding window and token bucket, and bounds every product: a
// sliding-window or token-bucket limit is refused with a
// *limiter.InputError naming entries[i].limit.uses when Uses > 2^42 or
// Uses × Window (in ms) > 2^52 (for example more than about 52 million
// uses per day). A fixed window only counts and compares whole-ms
// instants: its Uses may be up to 2^52. Nothing is ever rounded. The
// sliding log scores uses by
// their Unix µs, exact until the server's clock passes 2^53 µs (the year
// 2255); its windows may be as long as limiter.MaxWindow. The limiter's
// step-table vectors (storetest.Vectors) run through the script and give
// the same answers as package limiter.
//
// A token bucket's Burst and a token-bucket debit's cost are bounded as
// Uses is (at most 2^42, and times the window in ms at most 2^52),
// naming entries[i].limit.burst or entries[i].cost. Debits push counts
// past Uses: a count that grows so far that a product passes 2^53 makes
// the script and package limiter disagree, and the call then fails with
// ErrUnavailable rather than answer wrong. A sliding-log debit adds one
// member per use of its cost (at most Bounds.MaxLogUses).
//
// # Release and RetryAt
//
// Under limiter.WithRelease an allowed verdict carries Release, which
// gives back exactly this call, as limiter.Memory.ReleaseReceipts does:
// the sliding log removes the call's own members, the sliding window
// takes the cost off the window it was counted in, the token bucket gives
// back the part of the call's debt still outstanding, the fixed window
// takes the cost off its window while that window is still counting. RetryAt is the
// server's clock rounded up to whole milliseconds, the same for every
// refusal inside one wait.
package redis
