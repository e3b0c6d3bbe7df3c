package owner

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/logkey"
	"github.com/ringlimit/ringlimit/internal/testenv"
)

// The "slow step" warning names its key the way Config.LogKeys says:
// hashed by default (a nil LogKeys too), as it is with logkey.Plain. It
// wrote key=key-237 before.
func TestSlowStepLogKeys(t *testing.T) {
	plain, err := logkey.New(logkey.Plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	hashed, err := logkey.New(logkey.Hashed, secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		keys      *logkey.Keys
		want, not string
	}{
		{"default", nil, "key_hash=", "key-237"},
		{"hashed", hashed, "key_hash=" + hashed.Hash("key-237"), "key-237"},
		{"plain", plain, "key=key-237", "key_hash"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log testenv.LogBuffer
			rs := startRoutersWith(t, func(cfg *Config) {
				cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
				cfg.LogKeys = c.keys
			}, "a")
			rs["a"].slow(time.Now().Add(-time.Second), "forward to", "b", "key-237")
			line := log.String()
			if !strings.Contains(line, "slow step") || !strings.Contains(line, c.want) || strings.Contains(line, c.not) {
				t.Fatalf("log %q; want %q and no %q", line, c.want, c.not)
			}
		})
	}
}
