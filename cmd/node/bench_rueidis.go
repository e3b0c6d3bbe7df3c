package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/ringlimit/ringlimit/limiter"
	storeredis "github.com/ringlimit/ringlimit/store/redis"
)

// gcraScript is the usual Redis token bucket: GCRA, one string per key
// holding the theoretical arrival time in µs of the server's TIME,
// expiring when the bucket is full again. Returns 1 when allowed, 0 when
// refused; a refusal writes nothing.
//
// KEYS[1] the key; ARGV[1] the emission interval in µs (window / uses);
// ARGV[2] the tolerance in µs (capacity × emission interval); ARGV[3]
// unused (the sliding log's member), so both scripts take the same
// arguments.
const gcraScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local emission = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + emission
if new - now > tolerance then
  return 0
end
redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', math.ceil((new - now) / 1000))
return 1
`

// redisArgs are the scripts' ARGV but the member.
type redisArgs struct {
	a, b   string
	member bool // ARGV[3] is a member unique to the call (the sliding log)
}

func newRedisArgs(lim limiter.Limit) (redisArgs, error) {
	switch lim.Algorithm {
	case limiter.SlidingLog:
		return redisArgs{a: strconv.FormatInt(lim.Window.Milliseconds(), 10), b: strconv.FormatInt(lim.Uses, 10), member: true}, nil
	case limiter.TokenBucket:
		emission := float64(lim.Window/time.Microsecond) / float64(lim.Uses)
		tol := emission * float64(lim.Capacity())
		return redisArgs{a: strconv.FormatFloat(emission, 'f', -1, 64), b: strconv.FormatFloat(tol, 'f', -1, 64)}, nil
	}
	return redisArgs{}, usagef("--redis drives a sliding log or a token bucket (GCRA); --limit %v is %v", lim, lim.Algorithm)
}

// of is the call's ARGV: the member is w's next, unique in the run.
func (r redisArgs) of(w *worker) (string, string, string) {
	if !r.member {
		return r.a, r.b, ""
	}
	w.seq++
	w.member = strconv.AppendUint(strconv.AppendInt(w.member[:0], int64(w.id), 36), w.seq, 36)
	return r.a, r.b, string(w.member)
}

// newRedisBench is --mode redis's target through --redis-client.
func newRedisBench(ctx context.Context, addr, client string, conns int, keys []string, lim limiter.Limit) (target, error) {
	if client == redisClientGoRedis {
		return newRedisTarget(ctx, addr, conns, keys, lim)
	}
	return newRueidisTarget(ctx, addr, keys, lim)
}

// rueidisTarget drives the same scripts through rueidis, with its default
// auto-pipelining: concurrent calls share a connection's writes.
type rueidisTarget struct {
	c      rueidis.Client
	keys   []string
	script *rueidis.Lua
	args   redisArgs
}

func newRueidisTarget(ctx context.Context, addr string, keys []string, lim limiter.Limit) (*rueidisTarget, error) {
	args, err := newRedisArgs(lim)
	if err != nil {
		return nil, err
	}
	// One standalone server: no cluster discovery (whose background
	// refresh would outlive Close).
	opt := rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true}
	if strings.Contains(addr, "://") {
		// store/redis's reading of the URL (valkey:// too), then the same
		// address, credentials, database and TLS for rueidis.
		g, err := storeredis.ParseURL(addr, storeredis.Config{})
		if err != nil {
			return nil, usagef("--redis: %w", err)
		}
		opt.InitAddress = []string{g.Addr}
		opt.Username, opt.Password, opt.SelectDB, opt.TLSConfig = g.Username, g.Password, g.DB, g.TLSConfig
	}
	// Like go-redis's dial: a wrong address fails here, before the first call.
	opt.Dialer.Timeout = storeredis.MinDialTimeout
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis %s: load the script: %w", redisTargetName(addr), err)
	}
	src := slidingLogSrc
	if lim.Algorithm == limiter.TokenBucket {
		src = gcraScript
	}
	script := rueidis.NewLuaScript(src)
	// Load it once, so the run's calls are EVALSHA from the first.
	if err := c.Do(ctx, c.B().ScriptLoad().Script(src).Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis %s: load the script: %w", redisTargetName(addr), err)
	}
	return &rueidisTarget{c: c, keys: keys, script: script, args: args}, nil
}

func (r *rueidisTarget) decide(ctx context.Context, w *worker, key int) (bool, error) {
	a, b, c := r.args.of(w)
	n, err := r.script.Exec(ctx, r.c, r.keys[key:key+1], []string{a, b, c}).AsInt64()
	return n == 1, err
}

func (r *rueidisTarget) close() { r.c.Close() }
