package redis

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// EvalFunc runs script (the full Lua text) with keys as KEYS and args as
// ARGV, and returns the server's reply: for this store's script, an array
// of integers ([]any of int64, as go-redis returns it; int, float64 and
// decimal strings are accepted too). It must honour ctx.
type EvalFunc func(ctx context.Context, script string, keys []string, args []any) (any, error)

// EvalSHAFunc runs a script by its SHA1 (EVALSHA). When the server does not
// have it, the error must contain "NOSCRIPT" (as Redis's reply does) or
// wrap ErrNoScript; the store then sends the full script with EvalFunc.
type EvalSHAFunc func(ctx context.Context, sha1 string, keys []string, args []any) (any, error)

// HashMode says how keys are written in Redis.
type HashMode uint8

const (
	// HashAuto (the default) writes HMAC-SHA256(Secret, key) when Secret
	// is set, else a plain SHA-256 of the key (with one logged warning: a
	// plain hash of an IP address does not hide it, every IPv4 address can
	// be hashed in seconds). Either way the first 128 bits, in hex.
	HashAuto HashMode = iota
	// HashNone writes keys as they are (readable in Redis, e.g. for
	// debugging). Secret must then be empty.
	HashNone
)

// Defaults of Config.
const (
	DefaultPrefix  = "ringlimit:"
	DefaultTimeout = time.Second
	// MinSecret is the shortest Secret accepted, in bytes.
	MinSecret = 32
)

// Config configures New. Every field's zero value means its default.
type Config struct {
	// Eval runs the script in full. Required. GoRedis and Open fill it.
	Eval EvalFunc
	// EvalSHA, when set, runs the script by its SHA1; the full script is
	// sent only when the server answers NOSCRIPT. Default nil: every call
	// sends the whole script with Eval.
	EvalSHA EvalSHAFunc
	// Prefix starts every key, so two applications can share a server.
	// Default "ringlimit:".
	Prefix string
	// Secret keys the HMAC-SHA256 that hashes keys: at least 32 bytes (for
	// example from `openssl rand -base64 32`, the same on every instance).
	// Default nil (or empty): keys are hashed with plain SHA-256 (see HashAuto).
	Secret []byte
	// Hash picks how keys are written. Default HashAuto (hashed).
	Hash HashMode
	// Cluster says the server is a Redis Cluster, where one script can only
	// reach keys of one slot. Without HashTag every key of a call is then
	// counted by a script of its own, in order, and the uses counted before
	// a refusal are given back (a refused call counts against none unless
	// a give-back fails; that is logged at Error level). Default false.
	// GoRedis sets it for a *goredis.ClusterClient.
	Cluster bool
	// HashTag, when set, puts every key in the slot of "{HashTag}", so a
	// call's batch is one script again, even on a cluster; every call then
	// lands on that slot's node. It must not contain '{' or '}'. Default
	// "": no tag.
	HashTag string
	// Timeout bounds each call to Redis (every script of it). Default 1 s.
	Timeout time.Duration
	// RequireTLS makes Open and ParseURL refuse a plaintext redis:// (or
	// valkey://) URL to a host that is not loopback (default false: they
	// log a warning).
	RequireTLS bool
	// Logger receives warnings and give-back failures. Default
	// slog.Default().
	Logger *slog.Logger
	// Bounds on keys and batches; zero fields mean limiter's defaults.
	Bounds limiter.Bounds
}

// ErrConfig is matched by every *ConfigError.
var ErrConfig = errors.New("store/redis: invalid config")

// ConfigError reports a bad Config field.
type ConfigError struct {
	// Field is the Config field, e.g. "Secret".
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *ConfigError) Error() string { return "store/redis: config " + e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// withDefaults validates c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Eval == nil {
		return c, &ConfigError{Field: "Eval", Reason: "is required (use GoRedis or Open for go-redis)"}
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	switch c.Hash {
	case HashAuto:
		if len(c.Secret) > 0 && len(c.Secret) < MinSecret {
			return c, &ConfigError{Field: "Secret", Reason: "must be at least 32 bytes (e.g. `openssl rand -base64 32`)"}
		}
	case HashNone:
		if len(c.Secret) > 0 {
			return c, &ConfigError{Field: "Secret", Reason: "is set but Hash is HashNone (keys would not be hashed)"}
		}
	default:
		return c, &ConfigError{Field: "Hash", Reason: "unknown HashMode"}
	}
	if strings.ContainsAny(c.HashTag, "{}") {
		return c, &ConfigError{Field: "HashTag", Reason: "must not contain '{' or '}'"}
	}
	if c.Timeout < 0 {
		return c, &ConfigError{Field: "Timeout", Reason: "must not be negative"}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Bounds = c.Bounds.WithDefaults()
	c.Secret = append([]byte(nil), c.Secret...)
	return c, nil
}
