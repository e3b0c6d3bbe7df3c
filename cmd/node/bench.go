package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
)

// benchOptions are bench's flags.
type benchOptions struct {
	clientOptions
	concurrency, keys int
	duration          time.Duration
	limit             string
	zipf              float64
	redis, mode, http string
	seed              uint64
	cpuProfile        string
	route             string
	peek              bool
	refusalCache      bool
	procs             benchProcs // bench_procs.go
	cpu               benchCPUOptions
}

// Bench modes.
const (
	modeFleet = "ringlimit" // ConsumeMany through a client.Client
	modeRedis = "redis"     // a sliding-log or GCRA Lua script through --redis-client
	modePing  = "grpc-ping" // a bare gRPC unary call: the health Check of the first --server
)

// benchResult is bench's one JSON object.
type benchResult struct {
	Mode        string  `json:"mode"`
	Target      string  `json:"target"`
	Route       string  `json:"route,omitempty"`
	Peek        bool    `json:"peek,omitempty"`
	Concurrency int     `json:"concurrency"`
	Keys        int     `json:"keys"`
	Zipf        float64 `json:"zipf,omitempty"`
	Limit       string  `json:"limit"`
	DurationS   float64 `json:"duration_s"`
	Ops         uint64  `json:"ops"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50Us       float64 `json:"p50_us"`
	P90Us       float64 `json:"p90_us"`
	P99Us       float64 `json:"p99_us"`
	P999Us      float64 `json:"p999_us"`
	MaxUs       float64 `json:"max_us"`
	Allowed     uint64  `json:"allowed"`
	Refused     uint64  `json:"refused"`
	Errors      uint64  `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	// MaxOveradmit is the largest number admitted beyond the limit for any
	// key in any window, as the client saw it (see maxOveradmit), or for a
	// token bucket beyond its capacity plus its refill in any span (see
	// maxBucketOveradmit); -1 when not checked (a sliding window or fixed
	// window, a peek, or ping mode).
	MaxOveradmit int64  `json:"max_overadmit"`
	OveradmitKey string `json:"overadmit_key,omitempty"`
	// Client-side batching (fleet mode): calls per Multi RPC.
	ClientRPCs      int64   `json:"client_rpcs,omitempty"`
	ClientMeanBatch float64 `json:"client_mean_batch,omitempty"`
	// ClientCacheHits are the calls the client refused from its refusal
	// cache, without an RPC (fleet mode; counted among Refused).
	ClientCacheHits    int64 `json:"client_cache_hits"`
	ClientRefusalCache bool  `json:"client_refusal_cache"`
	// Server-side forwarding, from the nodes' /metrics (deltas over the
	// run): forwards / forward RPCs is the mean forward batch.
	Forwards         int64   `json:"forwards,omitempty"`
	ForwardRPCs      int64   `json:"forward_rpcs,omitempty"`
	MeanForwardBatch float64 `json:"mean_forward_batch,omitempty"`
	MetricsError     string  `json:"metrics_error,omitempty"`
	// CPU seconds the bench process itself used (user+system): on a small
	// machine the load generator competes with what it measures.
	BenchCPUS float64 `json:"bench_cpu_s"`
	benchProcResult
	benchCPU
}

// worker is one closed-loop caller; everything it records is its own.
type worker struct {
	id      int
	rng     *rand.Rand
	zipf    *rand.Zipf
	hist    histogram
	allowed uint64
	refused uint64
	errors  uint64
	firstEr error
	adm     []admission
	// per-target scratch, reused across calls
	entries []limiter.Entry
	member  []byte
	seq     uint64
	ping    *healthpb.HealthCheckRequest
}

func benchFlags(o *benchOptions, out io.Writer) *flag.FlagSet {
	fs := newFlagSet("bench", "bench --server H:P[,H:P...] [flags]", out)
	o.clientOptions.register(fs)
	fs.IntVar(&o.concurrency, "concurrency", 64, "closed-loop workers: each issues one call, waits for its verdict, issues the next (`N`)")
	fs.IntVar(&o.keys, "keys", 10000, "distinct keys (`N`)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to run")
	fs.StringVar(&o.limit, "limit", "100/1s", "`LIMIT` of every key")
	fs.Float64Var(&o.zipf, "zipf", 0, "pick keys by a Zipf law of exponent `S` (> 1; 0: uniformly)")
	fs.StringVar(&o.redis, "redis", "", "drive Redis (or Valkey) at `ADDR` or URL (redis://, rediss://, valkey://, valkeys://; a sliding-log or GCRA Lua script through --redis-client) instead of the fleet; with --mode redis and no --redis, REDIS_URL or VALKEY_URL")
	fs.StringVar(&o.mode, "mode", "", "`MODE`: ringlimit (default), redis (implied by --redis) or grpc-ping (a bare gRPC health Check of the first --server)")
	fs.StringVar(&o.http, "http", "", "HTTP `HOST:PORT[,...]` of the nodes, to read their /metrics (default: each --server's port + 1, the layout of serve's defaults and scripts/cluster.sh)")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed of the key choice (`N`; 0: from the clock)")
	fs.StringVar(&o.route, "route", "owner", "`ROUTE` of the fleet client: owner (each call straight to its key's owner, learnt from the ring) or any (round-robin over --server)")
	fs.BoolVar(&o.refusalCache, "client-refusal-cache", true, "fleet mode: the client refuses calls for counters a node refused, until their RetryAt, without an RPC")
	fs.BoolVar(&o.peek, "peek", false, "fleet mode: peek instead of consume (nothing is recorded or replicated; the fleet's ceiling for the load)")
	o.cpu.register(fs)
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the bench process's CPU profile (the client side) to `FILE`")
	o.procs.register(fs)
	return fs
}

func runBench(ctx context.Context, e *env, args []string) error {
	var o benchOptions
	fs := benchFlags(&o, e.stderr)
	if err := parse(fs, args, e.getenv, ""); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if o.mode == modeRedis && o.redis == "" {
		// The variables Redis clients and store/redis.Open read.
		o.redis = cmp.Or(e.getenv("REDIS_URL"), e.getenv("VALKEY_URL"))
	}
	if o.procs.processes > 1 {
		return runBenchProcesses(ctx, e, args, &o)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return usagef("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	res, err := bench(ctx, &o)
	if err != nil {
		return err
	}
	return printJSON(e.stdout, res)
}

func (o *benchOptions) validate() (limiter.Limit, error) {
	switch {
	case o.concurrency < 1:
		return limiter.Limit{}, usagef("--concurrency: must be at least 1, got %d", o.concurrency)
	case o.keys < 1 || o.keys > math.MaxUint32:
		return limiter.Limit{}, usagef("--keys: must be from 1 to %d, got %d", uint32(math.MaxUint32), o.keys)
	case o.duration <= 0 || o.duration > time.Hour:
		return limiter.Limit{}, usagef("--duration: must be from 1ns to 1h, got %v", o.duration)
	case o.zipf != 0 && !(o.zipf > 1):
		return limiter.Limit{}, usagef("--zipf: the exponent must be more than 1, got %v", o.zipf)
	}
	if o.mode == "" {
		o.mode = modeFleet
		if o.redis != "" {
			o.mode = modeRedis
		}
	}
	switch {
	case o.mode == modeRedis && o.redis == "":
		return limiter.Limit{}, usagef("--mode redis needs --redis ADDR or URL (or REDIS_URL or VALKEY_URL in the environment)")
	case o.mode != modeRedis && o.redis != "":
		return limiter.Limit{}, usagef("--redis is for --mode redis, not %s", o.mode)
	case o.route != "any" && o.route != "owner":
		return limiter.Limit{}, usagef("--route: %q is not any or owner", o.route)
	case o.mode != modeFleet && o.mode != modeRedis && o.mode != modePing:
		return limiter.Limit{}, usagef("--mode: %q is not ringlimit, redis or grpc-ping", o.mode)
	case o.peek && o.mode != modeFleet:
		return limiter.Limit{}, usagef("--peek is for the fleet (--mode ringlimit), not %s", o.mode)
	}
	if err := o.cpu.validate(); err != nil {
		return limiter.Limit{}, err
	}
	lim, err := limiter.ParseLimit(o.limit)
	if err != nil {
		return lim, usagef("--limit: %w", err)
	}
	return lim, nil
}

func bench(ctx context.Context, o *benchOptions) (*benchResult, error) {
	lim, err := o.validate()
	if err != nil {
		return nil, err
	}
	seed := o.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	// A run-unique prefix, so counts left by an earlier run do not refuse
	// this one's calls.
	prefix := "bench:" + strconv.FormatUint(seed%1e9, 36) + ":"
	keys := make([]string, o.keys)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	res := &benchResult{Mode: o.mode, Concurrency: o.concurrency, Keys: o.keys, Zipf: o.zipf, Limit: lim.String(), MaxOveradmit: -1}
	var tgt target
	var fleet *client.Client
	switch o.mode {
	case modeFleet:
		cacheSize := 0
		if !o.refusalCache {
			cacheSize = -1
		}
		fleet, err = o.dialRoute(ctx, o.route == "owner", cacheSize)
		if err != nil {
			return nil, err
		}
		if o.route == "owner" {
			waitRoute(ctx, fleet)
		}
		tgt = &fleetTarget{c: fleet, keys: keys, lim: lim, peek: o.peek}
		res.Target, res.Route, res.Peek = o.server, o.route, o.peek
	case modeRedis:
		tgt, err = newRedisBench(ctx, o.redis, o.cpu.redisClient, o.concurrency, keys, lim)
		if err != nil {
			return nil, err
		}
		res.Target, res.RedisClient = redisTargetName(o.redis), o.cpu.redisClient
	case modePing:
		addrs := splitList(o.server)
		if len(addrs) == 0 {
			return nil, usagef("--server: want a HOST:PORT")
		}
		sec, err := o.security()
		if err != nil {
			return nil, err
		}
		opts, err := client.Credentials(sec)
		if err != nil {
			return nil, err
		}
		if tgt, err = newPingTarget(addrs[0], opts); err != nil {
			return nil, err
		}
		res.Target = addrs[0]
	}
	defer tgt.close()

	var httpAddrs []string
	var httpTLS *tls.Config
	var before map[string]float64
	if o.mode == modeFleet {
		httpAddrs = o.httpAddrs()
		sec, err := o.security()
		if err != nil {
			return nil, err
		}
		if httpTLS, err = client.HTTPTLS(sec); err != nil {
			return nil, err
		}
		before, err = scrapeAll(ctx, httpAddrs, httpTLS)
		if err != nil {
			res.MetricsError = err.Error()
		}
	}
	checkAdmissions := o.mode != modePing && !o.peek && checksOveradmit(lim)
	cpu0 := cpuSeconds()
	meter := startCPUMeter(&o.cpu)

	workers := make([]*worker, o.concurrency)
	for i := range workers {
		w := &worker{id: i, rng: rand.New(rand.NewPCG(seed, o.procs.workerStream(o.concurrency, i)))}
		if o.zipf > 1 {
			w.zipf = rand.NewZipf(w.rng, o.zipf, 1, uint64(o.keys-1))
		}
		workers[i] = w
	}
	start, offsetUs := o.procs.childStart()
	stopAt := o.duration
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.loop(ctx, tgt, o.keys, start, stopAt, checkAdmissions) })
	}
	wg.Wait()
	elapsed := time.Since(start)

	res.BenchCPUS = round(cpuSeconds()-cpu0, 2)
	var h histogram
	var adm []admission
	for _, w := range workers {
		h.merge(&w.hist)
		res.Allowed += w.allowed
		res.Refused += w.refused
		res.Errors += w.errors
		if w.firstEr != nil && res.FirstError == "" {
			res.FirstError = w.firstEr.Error()
		}
		adm = append(adm, w.adm...)
		w.adm = nil
	}
	res.Ops = h.n
	meter.stop(h.n, &res.benchCPU)
	res.DurationS = round(elapsed.Seconds(), 3)
	res.OpsPerSec = round(float64(h.n)/elapsed.Seconds(), 0)
	us := func(ns int64) float64 { return round(float64(ns)/1e3, 1) }
	res.P50Us, res.P90Us, res.P99Us, res.P999Us = us(h.quantile(0.5)), us(h.quantile(0.9)), us(h.quantile(0.99)), us(h.quantile(0.999))
	res.MaxUs = us(h.max)
	if checkAdmissions {
		if err := o.procs.writeAdmissions(adm, offsetUs); err != nil {
			return nil, err
		}
		over, key := overadmitOf(adm, lim)
		res.MaxOveradmit = over
		if over > 0 {
			res.OveradmitKey = keys[key]
		}
	}
	if fleet != nil {
		st := fleet.Stats()
		res.ClientRPCs = st.RPCs
		res.ClientCacheHits, res.ClientRefusalCache = st.CacheHits, o.refusalCache
		if st.RPCs > 0 {
			res.ClientMeanBatch = round(float64(st.Calls)/float64(st.RPCs), 2)
		}
		ls := fleet.LeaseStats()
		res.Leases, res.LeaseLocal, res.LeasesGranted = o.leases, ls.Local, ls.Granted
	}
	if o.mode == modeFleet && res.MetricsError == "" {
		after, err := scrapeAll(ctx, httpAddrs, httpTLS)
		if err != nil {
			res.MetricsError = err.Error()
		} else {
			res.Forwards = int64(after["ringlimit_forwards_total"] - before["ringlimit_forwards_total"])
			res.ForwardRPCs = int64(after["ringlimit_forward_rpcs_total"] - before["ringlimit_forward_rpcs_total"])
			if res.ForwardRPCs > 0 {
				res.MeanForwardBatch = round(float64(res.Forwards)/float64(res.ForwardRPCs), 2)
			}
		}
	}
	return res, nil
}

// loop issues calls until stopAt has passed since start. Times are read
// from the monotonic clock around each call.
func (w *worker) loop(ctx context.Context, tgt target, nkeys int, start time.Time, stopAt time.Duration, checkAdmissions bool) {
	for {
		k := 0
		if w.zipf != nil {
			k = int(w.zipf.Uint64())
		} else if nkeys > 1 {
			k = w.rng.IntN(nkeys)
		}
		sent := time.Since(start)
		allowed, err := tgt.decide(ctx, w, k)
		recv := time.Since(start)
		w.hist.record(int64(recv - sent))
		switch {
		case err != nil:
			w.errors++
			if w.firstEr == nil {
				w.firstEr = err
			}
		case allowed:
			w.allowed++
			if checkAdmissions {
				w.adm = append(w.adm, admission{key: uint32(k), sent: uint32(sent / time.Microsecond), recv: uint32((recv + time.Microsecond - 1) / time.Microsecond)})
			}
		default:
			w.refused++
		}
		if recv >= stopAt || ctx.Err() != nil {
			return
		}
	}
}

// waitRoute gives an owner-routing client up to 2 s to learn the ring.
func waitRoute(ctx context.Context, c *client.Client) {
	deadline := time.Now().Add(2 * time.Second)
	for !c.Routing() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

func (o *clientOptions) security() (client.Security, error) {
	sec := client.Security{CertFile: o.tlsCert, KeyFile: o.tlsKey, CAFile: o.tlsCA}
	if o.authTokenFile != "" {
		t, err := readToken("--auth-token-file", o.authTokenFile)
		if err != nil {
			return sec, err
		}
		sec.AuthToken = t
	}
	return sec, nil
}

// httpAddrs is --http, or each --server's port + 1.
func (o *benchOptions) httpAddrs() []string {
	if o.http != "" {
		return splitList(o.http)
	}
	var out []string
	for _, s := range splitList(o.server) {
		host, port, err := net.SplitHostPort(s)
		p, perr := strconv.Atoi(port)
		if err != nil || perr != nil {
			continue
		}
		out = append(out, net.JoinHostPort(host, strconv.Itoa(p+1)))
	}
	return out
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
