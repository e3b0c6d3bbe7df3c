package main

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// --log-keys (RINGLIMIT_LOG_KEYS) and --log-key-secret-file reach the
// node's Config: hashed by default, plain on request; a secret only with
// hashed keys, and at least 32 bytes.
func TestLogKeysOption(t *testing.T) {
	secret := writeFile(t, "log.secret", "0123456789abcdef0123456789abcdef\n")
	short := writeFile(t, "short.secret", "0123456789")
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		args       []string
		env        map[string]string
		plain      bool
		secret     string
		errContain string
	}{
		{nil, nil, false, "", ""},
		{[]string{"--log-keys", "plain"}, nil, true, "", ""},
		{nil, map[string]string{"RINGLIMIT_LOG_KEYS": "plain"}, true, "", ""},
		{[]string{"--log-key-secret-file", secret}, nil, false, "0123456789abcdef0123456789abcdef", ""},
		{[]string{"--log-keys", "raw"}, nil, false, "", "--log-keys"},
		{[]string{"--log-key-secret-file", short}, nil, false, "", "at least 32"},
		{[]string{"--log-keys", "plain", "--log-key-secret-file", secret}, nil, false, "", "--log-key-secret-file"},
	} {
		o, err := parseServe(t, c.args, c.env)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.nodeConfig(discard)
		if c.errContain != "" {
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.errContain) {
				t.Errorf("%q %v: %v; want a usage error naming %q", c.args, c.env, err, c.errContain)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q %v: %v", c.args, c.env, err)
		}
		if cfg.LogPlainKeys != c.plain || string(cfg.LogKeySecret) != c.secret {
			t.Errorf("%q %v: LogPlainKeys %v LogKeySecret %q; want %v %q", c.args, c.env, cfg.LogPlainKeys, cfg.LogKeySecret, c.plain, c.secret)
		}
	}
}
