package logkey

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
)

// Mode says how log lines write keys.
type Mode uint8

const (
	// Hashed (the default) writes key_hash=<HMAC-SHA256 prefix>.
	Hashed Mode = iota
	// Plain writes key=<the key>.
	Plain
)

// MinSecret is the shortest secret accepted, in bytes (as store/redis).
const MinSecret = 32

// String returns "hashed" or "plain".
func (m Mode) String() string {
	switch m {
	case Hashed:
		return "hashed"
	case Plain:
		return "plain"
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// ParseMode reads "hashed" or "plain".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "hashed":
		return Hashed, nil
	case "plain":
		return Plain, nil
	}
	return 0, fmt.Errorf("logkey: %q is not hashed or plain", s)
}

// Keys writes keys into log attributes. A nil *Keys hashes with a random
// secret of its process; its methods are safe for concurrent use.
type Keys struct {
	mode   Mode
	secret []byte
}

// New returns Keys in mode. In Hashed mode secret keys the HMAC: at least
// MinSecret bytes, the same on every node so their lines correlate; nil
// draws a random secret for this Keys.
func New(mode Mode, secret []byte) (*Keys, error) {
	switch mode {
	case Hashed:
	case Plain:
		if len(secret) > 0 {
			return nil, fmt.Errorf("logkey: a secret is for hashed keys; mode is plain")
		}
		return &Keys{mode: Plain}, nil
	default:
		return nil, fmt.Errorf("logkey: unknown mode %d", mode)
	}
	if secret == nil {
		return &Keys{mode: Hashed, secret: randomSecret()}, nil
	}
	if len(secret) < MinSecret {
		return nil, fmt.Errorf("logkey: the secret must be at least %d bytes, got %d", MinSecret, len(secret))
	}
	return &Keys{mode: Hashed, secret: append([]byte(nil), secret...)}, nil
}

var processSecret = randomSecret()

func randomSecret() []byte {
	b := make([]byte, MinSecret)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather)
	return b
}

// Mode is k's mode.
func (k *Keys) Mode() Mode {
	if k == nil {
		return Hashed
	}
	return k.mode
}

// Attr is the log attribute for key: key_hash=<hex> or key=<key>.
func (k *Keys) Attr(key string) slog.Attr {
	if k.Mode() == Plain {
		return slog.String("key", key)
	}
	return slog.String("key_hash", k.Hash(key))
}

// Hash is the 32 hex digits of the first 128 bits of HMAC-SHA256(secret,
// key): what a hashed line writes for key.
func (k *Keys) Hash(key string) string {
	secret := processSecret
	if k != nil && k.secret != nil {
		secret = k.secret
	}
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:16])
}
