package redis

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/limiter"
)

// Both benchmarks run 64 goroutines (b.SetParallelism) against the same
// Redis, on the same kind of go-redis client, over 1024 keys with a
// sliding log of 100 uses per second, so both trim, count, add and expire.
const benchKeys = 1024

func parallel64(b *testing.B) { b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1)) }

// BenchmarkAdapter: ConsumeMany of one entry through the store (HMAC key
// hashing, EVALSHA of the full three-algorithm script, the verdict).
func BenchmarkAdapter(b *testing.B) {
	client := singleClient(b)
	s := newStore(b, client, Config{})
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "bench-" + strconv.Itoa(i)
	}
	l := limiter.Limit{Uses: 100, Window: time.Second}
	var next atomic.Uint64
	var failed atomic.Int64
	parallel64(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		e := []limiter.Entry{{Limit: l}}
		for pb.Next() {
			e[0].Key = keys[next.Add(1)%benchKeys]
			if _, err := s.ConsumeMany(ctx, e); err != nil {
				failed.Add(1)
			}
		}
	})
	if failed.Load() > 0 {
		b.Fatalf("%d calls failed", failed.Load())
	}
}

// baseline is a minimal hand-written sliding log: trim, count, add,
// expire, on the server's clock, one key, no hashing.
var baseline = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - tonumber(ARGV[1])))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], string.format('%.0f', now), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
return 0`)

// BenchmarkBaselineEVALSHA: the baseline script by EVALSHA via go-redis.
func BenchmarkBaselineEVALSHA(b *testing.B) {
	client := singleClient(b)
	prefix := uniquePrefix(b)
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = prefix + "bench-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	if err := baseline.Load(ctx, client).Err(); err != nil {
		b.Fatal(err)
	}
	var next, member atomic.Uint64
	var failed atomic.Int64
	parallel64(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := keys[next.Add(1)%benchKeys]
			m := strconv.FormatUint(member.Add(1), 36)
			if err := baseline.EvalSha(ctx, client, []string{k}, 1_000_000, 100, m, 1001).Err(); err != nil {
				failed.Add(1)
			}
		}
	})
	if failed.Load() > 0 {
		b.Fatalf("%d calls failed", failed.Load())
	}
}
