// Package logkey writes rate-limit keys into log lines.
//
// Keys are often personal data (a user id, an IP address, an e-mail), so a
// node's logs do not write them as they are by default: Hashed writes
// key_hash=<32 hex digits>, the first 128 bits of HMAC-SHA256(secret,
// key), the digest store/redis writes for the same key and secret
// (store/redis.HashKey), so a tool that knows the secret can tell which
// key a line is about. Without a configured secret each process draws a
// random one: lines of one process still correlate, and nothing in them
// can be turned back into a key, not even by hashing every IPv4 address.
// Plain writes key=<the key>, for debugging.
//
// Every log line of the node that names a key takes its attribute from a
// *Keys. Keys an operator names for tracing (--trace-keys) are logged as
// given: the operator chose to see them.
package logkey
