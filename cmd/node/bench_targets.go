package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
	storeredis "github.com/ringlimit/ringlimit/store/redis"
)

// target is what the bench drives: one decision per call.
type target interface {
	// decide takes one use of key (an index into the bench's keys) for
	// worker w.
	decide(ctx context.Context, w *worker, key int) (allowed bool, err error)
	close()
}

// fleetTarget drives a node fleet through a client.Client.
type fleetTarget struct {
	c    *client.Client
	keys []string
	lim  limiter.Limit
	peek bool
}

func (f *fleetTarget) decide(ctx context.Context, w *worker, key int) (bool, error) {
	if w.entries == nil {
		w.entries = []limiter.Entry{{Limit: f.lim}}
	}
	w.entries[0].Key = f.keys[key]
	if f.peek {
		v, err := f.c.PeekMany(ctx, w.entries)
		return v.Allowed, err
	}
	v, err := f.c.ConsumeMany(ctx, w.entries)
	return v.Allowed, err
}

func (f *fleetTarget) close() { f.c.Close() }

// slidingLogScript is the usual Redis sliding log: one ZSET per key,
// scored by the server's TIME in µs; trim what left the window, count,
// add when under the limit, PEXPIRE the key by the window. Returns 1 when
// allowed, 0 when refused.
//
// KEYS[1] the key; ARGV[1] the window in ms; ARGV[2] the uses; ARGV[3] a
// member unique to the call.
var slidingLogScript = redis.NewScript(slidingLogSrc)

const slidingLogSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local w = tonumber(ARGV[1]) * 1000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - w)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
`

// redisTarget drives slidingLogScript (or, for a token bucket,
// gcraScript) through go-redis (EVALSHA, with go-redis falling back to
// EVAL when the script is not loaded).
type redisTarget struct {
	rdb    *redis.Client
	keys   []string
	script *redis.Script
	args   redisArgs
}

func newRedisTarget(ctx context.Context, addr string, conns int, keys []string, lim limiter.Limit) (*redisTarget, error) {
	args, err := newRedisArgs(lim)
	if err != nil {
		return nil, err
	}
	script := slidingLogScript
	if lim.Algorithm == limiter.TokenBucket {
		script = redis.NewScript(gcraScript)
	}
	opt := &redis.Options{Addr: addr, DialTimeout: storeredis.MinDialTimeout}
	if strings.Contains(addr, "://") {
		var err error
		// store/redis's reading: valkey:// and valkeys:// too, TLS for
		// rediss://, a dial timeout of at least 1 s.
		if opt, err = storeredis.ParseURL(addr, storeredis.Config{}); err != nil {
			return nil, usagef("--redis: %w", err)
		}
	}
	opt.PoolSize, opt.MinIdleConns = conns, conns
	rdb := redis.NewClient(opt)
	// Loading the script connects: a wrong address fails here, before the
	// first call.
	if err := script.Load(ctx, rdb).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis %s: load the script: %w", redisTargetName(addr), err)
	}
	return &redisTarget{rdb: rdb, keys: keys, script: script, args: args}, nil
}

func (r *redisTarget) decide(ctx context.Context, w *worker, key int) (bool, error) {
	a, b, c := r.args.of(w)
	n, err := r.script.EvalSha(ctx, r.rdb, r.keys[key:key+1], a, b, c).Int64()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		n, err = r.script.Eval(ctx, r.rdb, r.keys[key:key+1], a, b, c).Int64()
	}
	return n == 1, err
}

func (r *redisTarget) close() { r.rdb.Close() }

// pingTarget is a bare gRPC unary round trip: the standard health Check
// of one node, the floor any RPC-based decision sits on.
type pingTarget struct {
	conn *grpc.ClientConn
	hc   healthpb.HealthClient
}

func newPingTarget(addr string, opts []grpc.DialOption) (*pingTarget, error) {
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	return &pingTarget{conn: conn, hc: healthpb.NewHealthClient(conn)}, nil
}

func (p *pingTarget) decide(ctx context.Context, w *worker, _ int) (bool, error) {
	if w.ping == nil {
		w.ping = &healthpb.HealthCheckRequest{}
	}
	_, err := p.hc.Check(ctx, w.ping)
	return err == nil, err
}

func (p *pingTarget) close() { p.conn.Close() }

// redisTargetName is --redis as the output names it: the host of a URL,
// never its password.
func redisTargetName(addr string) string {
	if !strings.Contains(addr, "://") {
		return addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host
}
