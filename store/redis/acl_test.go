package redis

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
)

// aclLine is the least-privilege user doc.go documents (keep them equal).
const aclLine = "ACL SETUSER ringlimit on >password resetkeys ~ringlimit:* -@all +evalsha +eval +time +zremrangebyscore +zcard +zrange +zadd +zrem +hmget +hset +pexpire"

// The documented ACL user can run every operation of the store, and
// nothing outside its keys.
func TestLeastPrivilegeACL(t *testing.T) {
	if doc, err := os.ReadFile("doc.go"); err != nil || !strings.Contains(string(doc), aclLine) {
		t.Fatalf("doc.go does not document the ACL line tested here (%v)", err)
	}
	addr, _ := testenv.RedisServer(t)
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	defer admin.Close()
	ctx := context.Background()
	args := []any{}
	for _, f := range strings.Fields(aclLine) {
		args = append(args, f)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("%s: %v", aclLine, err)
	}
	s, err := Open("redis://ringlimit:password@"+addr, Config{Secret: testSecret, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		l := limiter.Limit{Algorithm: alg, Uses: 1, Window: time.Minute}
		v, err := s.ConsumeMany(limiter.WithRelease(ctx), []limiter.Entry{{Key: "k", Limit: l, Cost: 1}})
		if err != nil || !v.Allowed {
			t.Fatalf("%v as the ACL user: %+v, %v", alg, v, err)
		}
		if p, err := s.PeekMany(ctx, []limiter.Entry{{Key: "k", Limit: l}}); err != nil || p.Allowed {
			t.Fatalf("%v peek as the ACL user: %+v, %v", alg, p, err)
		}
		if err := v.Release(ctx); err != nil {
			t.Fatalf("%v release as the ACL user: %v", alg, err)
		}
		if p, err := s.PeekMany(ctx, []limiter.Entry{{Key: "k", Limit: l}}); err != nil || !p.Allowed {
			t.Fatalf("%v peek after release as the ACL user: %+v, %v", alg, p, err)
		}
	}
	// The script was sent in full (NOSCRIPT on a fresh server) and by SHA1.
	other, err := Open("redis://ringlimit:password@"+addr, Config{Secret: testSecret, Prefix: "other:"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ConsumeMany(ctx, []limiter.Entry{{Key: "k", Limit: limiter.Limit{Uses: 1, Window: time.Second}}}); err == nil ||
		!strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a prefix outside ~ringlimit:* as the ACL user: %v, want NOPERM", err)
	}
}
