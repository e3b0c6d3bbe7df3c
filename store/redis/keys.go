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
// alg is "log", "win" or "tb". The algorithm and the window are part of
// the key, so changing a rule's window (or algorithm) starts fresh
// counters; changing its uses keeps them. hash is the first 128 bits of
// HMAC-SHA256(secret, key) (or SHA-256 without a secret) in hex, or the
// key itself under HashNone.
type keyer struct {
	prefix string // prefix plus the tag part
	mode   HashMode
	secret []byte
	pool   sync.Pool // hash.Hash (HMAC), reused
}

func newKeyer(c *Config) *keyer {
	k := &keyer{prefix: c.Prefix, mode: c.Hash, secret: c.Secret}
	if c.HashTag != "" {
		k.prefix += "{" + c.HashTag + "}:"
	}
	if len(k.secret) > 0 {
		k.pool.New = func() any { return hmac.New(sha256.New, k.secret) }
	}
	return k
}

var algTags = [...]string{limiter.SlidingLog: "log", limiter.SlidingWindow: "win", limiter.TokenBucket: "tb"}

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
	case len(k.secret) > 0:
		h := k.pool.Get().(hash.Hash)
		h.Reset()
		h.Write([]byte(e.Key))
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		k.pool.Put(h)
		b = hex.AppendEncode(b, sum[:16])
	default:
		sum := sha256.Sum256([]byte(e.Key))
		b = hex.AppendEncode(b, sum[:16])
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
