package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
)

// clientOptions are the flags of every command that calls a fleet.
type clientOptions struct {
	server                                string
	timeout                               time.Duration
	tlsCert, tlsKey, tlsCA, authTokenFile string
	leases                                bool
}

func (o *clientOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.server, "server", ringlimit.DefaultGRPCAddr, "gRPC `HOST:PORT[,HOST:PORT...]` of the nodes to call (any node answers for any key)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Second, "longest a call may take, retries on other nodes included")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "client certificate `FILE` (mTLS; needs --tls-key and --tls-ca)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "private key `FILE` of --tls-cert")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "CA `FILE` the nodes' certificates chain to")
	fs.StringVar(&o.authTokenFile, "auth-token-file", "", "`FILE` holding the bearer token of the client API")
	fs.BoolVar(&o.leases, "leases", true, "ask keys' owners for leases of hot keys and decide their calls in this process (--leases=false: every call goes to its owner)")
}

func (o *clientOptions) dial(ctx context.Context) (*client.Client, error) {
	return o.dialRoute(ctx, false, 0)
}

// dialRoute dials the fleet, routing to owners or round-robin, with a
// refusal cache of cacheSize entries (0: the default; negative: off).
func (o *clientOptions) dialRoute(ctx context.Context, toOwner bool, cacheSize int) (*client.Client, error) {
	addrs := splitList(o.server)
	if len(addrs) == 0 {
		return nil, usagef("--server: want at least one HOST:PORT")
	}
	if o.timeout <= 0 {
		return nil, usagef("--timeout: must be positive, got %v", o.timeout)
	}
	sec, err := o.security()
	if err != nil {
		return nil, err
	}
	return client.DialConfig(ctx, client.Config{Addrs: addrs, Security: sec, Timeout: o.timeout, RoundRobin: !toOwner, RefusalCacheSize: cacheSize, Leases: &o.leases})
}

func runConsume(ctx context.Context, e *env, args []string) error { return decide(ctx, e, args, false) }

func runPeek(ctx context.Context, e *env, args []string) error { return decide(ctx, e, args, true) }

// decide runs consume or peek: one batch of every KEY under one limit,
// printed as one JSON object; errRefused when refused.
func decide(ctx context.Context, e *env, args []string, peek bool) error {
	name := "consume"
	if peek {
		name = "peek"
	}
	var co clientOptions
	var limit, algorithm string
	var cost int64
	var debit bool
	fs := newFlagSet(name, name+" --server H:P --limit 5/1m [--algorithm A] [--cost N] [--debit] KEY [KEY...]", e.stderr)
	co.register(fs)
	fs.StringVar(&limit, "limit", "", "`USES/WINDOW` of every key, e.g. 5/1m, token-bucket:100/1s, token-bucket:100/1s,burst=500 or concurrency:10/30s (required)")
	fs.StringVar(&algorithm, "algorithm", "", "`ALGORITHM`: sliding-log (default), sliding-window, token-bucket, fixed-window or concurrency (a slot the CLI holds until its TTL: it cannot release it); overrides a prefix of --limit")
	fs.Int64Var(&cost, "cost", 1, "uses each key takes (`N`)")
	fs.BoolVar(&debit, "debit", false, "record --cost as usage after the fact, whatever the budget says (may pass the limit); exit 1 when the budget was already exceeded")
	if err := parse(fs, args, e.getenv, ""); err != nil {
		return err
	}
	if limit == "" {
		return usagef("--limit is required (e.g. --limit 5/1m)")
	}
	lim, err := limiter.ParseLimit(limit)
	if err != nil {
		return usagef("--limit: %w", err)
	}
	if algorithm != "" {
		if lim.Algorithm, err = limiter.ParseAlgorithm(algorithm); err != nil {
			return usagef("--algorithm: %w", err)
		}
	}
	if fs.NArg() == 0 {
		return usagef("want at least one KEY")
	}
	entries := make([]limiter.Entry, fs.NArg())
	for i, k := range fs.Args() {
		entries[i] = limiter.Entry{Key: k, Limit: lim, Cost: cost, Debit: debit}
	}
	c, err := co.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, co.timeout)
	defer cancel()
	var v limiter.Verdict
	if peek {
		v, err = c.PeekMany(ctx, entries)
	} else {
		v, err = c.ConsumeMany(ctx, entries)
	}
	if err != nil {
		return err
	}
	if err := printJSON(e.stdout, ringlimit.VerdictJSON(v)); err != nil {
		return err
	}
	if !v.Allowed {
		return errRefused
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
