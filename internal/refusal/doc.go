// Package refusal is the refusal cache that nodes and the fleet client
// keep: after an owner refused a call with a wait, later calls for the
// same counter are refused locally until that wait is over, so a hot
// refused key costs no round trip and no work at its owner.
//
// The cache can only refuse more, never admit more: a hit is a refusal
// the owner gave for the same counter (key, algorithm, window, uses) and a
// cost at least as large, and it lasts no longer than the owner said. The
// one way it can be wrong is stale: when uses are given back at the owner
// (a release), the counter may have room before the cached wait is over.
// Owners therefore tell the holders of such caches to Drop the key; until
// that message arrives the cache keeps refusing, never past the cached
// wait.
//
// Time is an argument (microseconds on the caller's monotonic clock), so
// the cache has no clock of its own. Its size is bounded: when full, the
// entries whose waits end soonest are evicted first (they are the least
// worth keeping: expired ones, then those about to expire).
package refusal
