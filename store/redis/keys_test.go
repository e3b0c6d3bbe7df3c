package redis

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
)

// Keys are prefix, algorithm, window (ms) and the HMAC of the key; each
// has a PEXPIRE that lets it go once its uses have left the window.
func TestKeysInRedis(t *testing.T) {
	client := singleClient(t)
	ctx := context.Background()
	prefix := uniquePrefix(t)
	s := newStore(t, client, Config{Prefix: prefix})
	cases := []struct {
		alg    limiter.Algorithm
		tag    string
		maxTTL time.Duration // the longest the state can matter, plus slack
	}{
		{limiter.SlidingLog, "log", 60*time.Second + 2*time.Millisecond},
		{limiter.SlidingWindow, "win", 120*time.Second + 2*time.Millisecond},
		{limiter.TokenBucket, "tb", 60*time.Second/5 + 3*time.Millisecond}, // one use of 5 per minute: 12 s of debt
	}
	for _, c := range cases {
		l := limiter.Limit{Algorithm: c.alg, Uses: 5, Window: time.Minute}
		mustConsume(t, s, "203.0.113.7", l, true)
		want := prefix + c.tag + ":60000:" + HashKey("203.0.113.7", testSecret)
		n, err := client.Exists(ctx, want).Result()
		if err != nil || n != 1 {
			t.Fatalf("%v: key %q not in Redis (%d, %v)", c.alg, want, n, err)
		}
		ttl, err := client.PTTL(ctx, want).Result()
		if err != nil || ttl <= 0 || ttl > c.maxTTL {
			t.Fatalf("%v: PTTL %v (%v), want in (0, %v]", c.alg, ttl, err, c.maxTTL)
		}
		// Nothing of the key in plain text under the prefix.
		keys, _ := client.Keys(ctx, prefix+"*203.0.113.7*").Result()
		if len(keys) != 0 {
			t.Fatalf("%v: plaintext key in Redis: %v", c.alg, keys)
		}
	}
	// A window change starts fresh counters: another key.
	l := limiter.Limit{Uses: 1, Window: time.Minute}
	mustConsume(t, s, "w", l, true)
	mustConsume(t, s, "w", l, false)
	mustConsume(t, s, "w", limiter.Limit{Uses: 1, Window: 2 * time.Minute}, true)
}

func TestKeysPlainAndTagged(t *testing.T) {
	client := singleClient(t)
	ctx := context.Background()
	prefix := uniquePrefix(t)
	plain := newStore(t, client, Config{Prefix: prefix, Hash: HashNone})
	mustConsume(t, plain, "user:42", limiter.Limit{Uses: 1, Window: time.Second}, true)
	if n, _ := client.Exists(ctx, prefix+"log:1000:user:42").Result(); n != 1 {
		t.Fatalf("HashNone: key %q not in Redis", prefix+"log:1000:user:42")
	}
	tagged := newStore(t, client, Config{Prefix: prefix, HashTag: "login"})
	mustConsume(t, tagged, "user:42", limiter.Limit{Uses: 1, Window: time.Second}, true)
	want := prefix + "{login}:log:1000:" + HashKey("user:42", testSecret)
	if n, _ := client.Exists(ctx, want).Result(); n != 1 {
		t.Fatalf("HashTag: key %q not in Redis", want)
	}
	unkeyed := newStore(t, client, Config{Prefix: prefix, Secret: []byte{}})
	mustConsume(t, unkeyed, "user:42", limiter.Limit{Uses: 1, Window: 2 * time.Second}, true)
	if n, _ := client.Exists(ctx, prefix+"log:2000:"+HashKey("user:42", nil)).Result(); n != 1 {
		t.Fatalf("no secret: the SHA-256 key is not in Redis")
	}
}

func TestConfigErrors(t *testing.T) {
	eval := GoRedis(singleClient(t)).Eval
	cases := []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Eval"},
		{Config{Eval: eval, Secret: []byte("short")}, "Secret"},
		{Config{Eval: eval, Hash: HashNone, Secret: testSecret}, "Secret"},
		{Config{Eval: eval, Hash: 7}, "Hash"},
		{Config{Eval: eval, HashTag: "a}b"}, "HashTag"},
		{Config{Eval: eval, Timeout: -time.Second}, "Timeout"},
	}
	for _, c := range cases {
		_, err := New(c.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !errors.Is(err, ErrConfig) {
			t.Fatalf("New(%+v): %v, want a *ConfigError for %s", c.cfg, err, c.field)
		}
	}
}

// Without a secret, New warns once that plain SHA-256 does not hide IPs.
func TestPlainHashWarns(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	eval := GoRedis(singleClient(t)).Eval
	if _, err := New(Config{Eval: eval, Logger: log}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "does not hide IP addresses"); n != 1 {
		t.Fatalf("%d warnings, want 1: %s", n, buf.String())
	}
	buf.Reset()
	if _, err := New(Config{Eval: eval, Logger: log, Secret: testSecret}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("with a secret New logged %q", buf.String())
	}
}

func TestURLSafety(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	for _, u := range []string{"redis://127.0.0.1:6379/0", "redis://localhost:6379", "redis://[::1]:6379",
		"rediss://redis.example.com:6380", "unix:///run/redis.sock"} {
		buf.Reset()
		if _, err := ParseURL(u, Config{RequireTLS: true, Logger: log}); err != nil {
			t.Fatalf("ParseURL(%q) with RequireTLS: %v, want it to pass", u, err)
		}
		if buf.Len() != 0 {
			t.Fatalf("ParseURL(%q) logged %q", u, buf.String())
		}
	}
	for _, u := range []string{"redis://redis.example.com:6379", "redis://10.1.2.3:6379/0",
		"redis://127.0.0.1:7000?addr=10.1.2.3:7001"} {
		buf.Reset()
		if err := checkURL(u, Config{Logger: log}); err != nil || !strings.Contains(buf.String(), "unencrypted") {
			t.Fatalf("checkURL(%q): %v, log %q; want a warning", u, err, buf.String())
		}
		var ce *ConfigError
		if err := checkURL(u, Config{RequireTLS: true, Logger: log}); !errors.As(err, &ce) || ce.Field != "URL" {
			t.Fatalf("checkURL(%q) with RequireTLS: %v, want a *ConfigError for URL", u, err)
		}
	}
	if _, err := Open("redis://10.1.2.3:6379", Config{RequireTLS: true, Cluster: true}); !errors.Is(err, ErrConfig) {
		t.Fatalf("Open cluster plaintext remote with RequireTLS: %v, want ErrConfig", err)
	}
	if _, err := ParseURL("http://127.0.0.1", Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("ParseURL(http://): %v, want ErrConfig", err)
	}
}

// A limit whose arithmetic could pass 2^52 in Lua's doubles is refused
// with an InputError naming the field, and the batch records nothing.
func TestInexactLimitRefused(t *testing.T) {
	s := newStore(t, singleClient(t), Config{})
	ctx := context.Background()
	good := limiter.Limit{Uses: 1, Window: time.Minute}
	for _, bad := range []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Uses: 1 << 43, Window: time.Millisecond},
		{Algorithm: limiter.SlidingWindow, Uses: 1_000_000_000, Window: 24 * time.Hour},
	} {
		_, err := s.ConsumeMany(ctx, []limiter.Entry{{Key: "good", Limit: good}, {Key: "bad", Limit: bad}})
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != "entries[1].limit.uses" || !errors.Is(err, limiter.ErrInvalid) {
			t.Fatalf("%v: %v, want an InputError for entries[1].limit.uses", bad, err)
		}
	}
	mustConsume(t, s, "good", good, true) // nothing was recorded
	// The largest limits that stay exact are accepted.
	for _, ok := range []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Uses: 1 << 42, Window: time.Second},
		{Algorithm: limiter.SlidingWindow, Uses: 50_000_000, Window: 24 * time.Hour},
		{Algorithm: limiter.TokenBucket, Uses: 1, Window: limiter.MaxWindow},
	} {
		mustConsume(t, s, "ok", ok, true)
	}
}

// On a cluster without HashTag a refused batch gives back what it
// counted; a give-back that fails is logged and leaves its count.
func TestClusterGiveBackFailureLogged(t *testing.T) {
	client := clusterClient(t, testenv.RedisCluster(t))
	var buf bytes.Buffer
	s := newStore(t, client, Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	ctx := context.Background()
	l := limiter.Limit{Uses: 1, Window: time.Minute}
	mustConsume(t, s, "spent", l, true)
	batch := []limiter.Entry{{Key: "free", Limit: l}, {Key: "spent", Limit: l}}
	if v, err := s.ConsumeMany(ctx, batch); err != nil || v.Allowed {
		t.Fatalf("batch with a spent key: %+v, %v; want refused", v, err)
	}
	mustConsume(t, s, "free", l, true) // its use in the refused batch was given back
	// Now make every give-back fail.
	eval, sha := s.cfg.Eval, s.cfg.EvalSHA
	fail := func(args []any) error {
		if args[0] == opRelease {
			return errors.New("injected: connection reset")
		}
		return nil
	}
	s.cfg.Eval = func(ctx context.Context, src string, keys []string, args []any) (any, error) {
		if err := fail(args); err != nil {
			return nil, err
		}
		return eval(ctx, src, keys, args)
	}
	s.cfg.EvalSHA = func(ctx context.Context, h string, keys []string, args []any) (any, error) {
		if err := fail(args); err != nil {
			return nil, err
		}
		return sha(ctx, h, keys, args)
	}
	batch = []limiter.Entry{{Key: "free2", Limit: l}, {Key: "spent", Limit: l}}
	if v, err := s.ConsumeMany(ctx, batch); err != nil || v.Allowed {
		t.Fatalf("batch with a spent key: %+v, %v; want refused", v, err)
	}
	if !strings.Contains(buf.String(), "give-back") || !strings.Contains(buf.String(), "injected") {
		t.Fatalf("a failed give-back was not logged: %q", buf.String())
	}
	mustConsume(t, s, "free2", l, false) // the failed give-back left its count
}
