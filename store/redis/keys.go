package redis

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// keyer writes a counter's Redis key:
//
//	<prefix>[{<tag>}:]<alg>:<window ms>:<hash>
//
// alg is "log", "win", "tb" or "fw". The algorithm and the window are part of
// the key, so changing a rule's window (or algorithm) starts fresh
// counters; changing its uses keeps them. hash is the first 128 bits of
// HMAC-SHA256(secret, key) (or SHA-256 without a secret) in hex, or the
// key itself under HashNone.
type keyer struct {
	prefix string // prefix plus the tag part
	mode   HashMode
	secret []byte
	pool   sync.Pool // *hasher, reused
}

// hasher is a pooled HMAC-SHA256 (or SHA-256) with a scratch buffer, so
// hashing a key allocates nothing: the key is written through the buffer
// (a slice passed to hash.Hash escapes, a Go string converted to one would
// be copied to the heap on every call) and the sum lands in it too.
type hasher struct {
	h   hash.Hash
	buf [64]byte
}

// sum128 writes the first 128 bits of key's hash, in hex, after b.
func (x *hasher) sum128(b []byte, key string) []byte {
	x.h.Reset()
	for len(key) > 0 {
		n := copy(x.buf[:], key)
		x.h.Write(x.buf[:n])
		key = key[n:]
	}
	sum := x.h.Sum(x.buf[:0])
	return hex.AppendEncode(b, sum[:16])
}

func newKeyer(c *Config) *keyer {
	k := &keyer{prefix: c.Prefix, mode: c.Hash, secret: c.Secret}
	if c.HashTag != "" {
		k.prefix += "{" + c.HashTag + "}:"
	}
	if len(k.secret) > 0 {
		k.pool.New = func() any { return &hasher{h: hmac.New(sha256.New, k.secret)} }
	} else {
		k.pool.New = func() any { return &hasher{h: sha256.New()} }
	}
	return k
}

var algTags = [...]string{limiter.SlidingLog: "log", limiter.SlidingWindow: "win", limiter.TokenBucket: "tb", limiter.FixedWindow: "fw", limiter.Concurrency: "cc"}

func (k *keyer) key(e *limiter.Entry) string {
	var buf [128]byte
	b := append(buf[:0], k.prefix...)
	b = append(b, algTags[e.Limit.Algorithm]...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(e.Limit.Window/time.Millisecond), 10)
	b = append(b, ':')
	switch {
	case k.mode == HashNone:
		b = append(b, e.Key...)
	default:
		x := k.pool.Get().(*hasher)
		b = x.sum128(b, e.Key)
		k.pool.Put(x)
	}
	return string(b)
}

// HashKey returns the 32 hex digits (128 bits) this store writes for key:
// HMAC-SHA256 under secret, or plain SHA-256 when secret is empty. Tools
// that look a key up in Redis use it.
func HashKey(key string, secret []byte) string {
	var sum []byte
	if len(secret) > 0 {
		h := hmac.New(sha256.New, secret)
		h.Write([]byte(key))
		sum = h.Sum(nil)
	} else {
		s := sha256.Sum256([]byte(key))
		sum = s[:]
	}
	return hex.EncodeToString(sum[:16])
}
