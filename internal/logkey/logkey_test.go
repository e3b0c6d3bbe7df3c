package logkey

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/store/redis"
)

func logLine(k *Keys, key string) string {
	var b bytes.Buffer
	slog.New(slog.NewTextHandler(&b, nil)).Warn("slow step", k.Attr(key))
	return b.String()
}

// Hashed (the default, and a nil *Keys) never writes the key; Plain does.
func TestAttr(t *testing.T) {
	hashed, err := New(Hashed, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(Plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]*Keys{"hashed": hashed, "nil": nil} {
		line := logLine(k, "user:alice@example.com")
		if strings.Contains(line, "alice") || !strings.Contains(line, "key_hash="+k.Hash("user:alice@example.com")) {
			t.Errorf("%s: %q; want key_hash and no key", name, line)
		}
		if k.Hash("a") == k.Hash("b") || len(k.Hash("a")) != 32 {
			t.Errorf("%s: Hash(a)=%s Hash(b)=%s", name, k.Hash("a"), k.Hash("b"))
		}
	}
	if line := logLine(plain, "user:alice"); !strings.Contains(line, "key=user:alice") {
		t.Errorf("plain: %q; want key=user:alice", line)
	}
}

// With a secret, a hashed line names the key as store/redis does, so one
// lookup serves both; without one, two processes (two Keys) differ.
func TestSecret(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	k, err := New(Hashed, secret)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := k.Hash("login:bob"), redis.HashKey("login:bob", secret); got != want {
		t.Errorf("Hash = %s, store/redis.HashKey = %s", got, want)
	}
	a, _ := New(Hashed, nil)
	b, _ := New(Hashed, nil)
	if a.Hash("k") == b.Hash("k") {
		t.Error("two random secrets gave the same hash")
	}
	if _, err := New(Hashed, secret[:31]); err == nil {
		t.Error("a 31-byte secret was accepted")
	}
	if _, err := New(Plain, secret); err == nil {
		t.Error("a secret with plain keys was accepted")
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"hashed": Hashed, "plain": Plain} {
		if m, err := ParseMode(s); err != nil || m != want || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("raw"); err == nil || !strings.Contains(err.Error(), `"raw"`) {
		t.Errorf("ParseMode(raw) = %v", err)
	}
}
