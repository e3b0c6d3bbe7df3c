package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testSecret is a fixed 32-byte secret for tests.
var testSecret = []byte("0123456789abcdef0123456789abcdef")

// uniquePrefix keeps a test's keys apart on a shared server.
func uniquePrefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return "ringlimit-test:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// singleClient returns a go-redis client to the test Redis (testenv),
// closed at cleanup.
func singleClient(t testing.TB) *goredis.Client {
	t.Helper()
	opt, err := ParseURL(testenv.RedisURL(t), Config{})
	if err != nil {
		t.Fatalf("ParseURL: %v", err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer PING: %v (start one with `make services` or set RINGLIMIT_REDIS_URL)", opt.Addr, err)
	}
	return c
}

// clusterClient returns a go-redis cluster client to a private 3-master
// Redis Cluster (testenv), closed at cleanup.
func clusterClient(t testing.TB, addrs []string) *goredis.ClusterClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore makes a store on client with cfg's other fields, closed at cleanup.
func newStore(t testing.TB, client goredis.UniversalClient, cfg Config) *Store {
	t.Helper()
	g := GoRedis(client)
	cfg.Eval, cfg.EvalSHA = g.Eval, g.EvalSHA
	cfg.Cluster = cfg.Cluster || g.Cluster
	if cfg.Prefix == "" {
		cfg.Prefix = uniquePrefix(t)
	}
	if cfg.Secret == nil && cfg.Hash == HashAuto {
		cfg.Secret = testSecret
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
