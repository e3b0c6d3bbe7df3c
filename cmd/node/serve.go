package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/internal/logkey"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

// serveGCPercent is serve's garbage-collection target (GOGC) unless the
// GOGC environment variable sets one.
const serveGCPercent = 400

// serveOptions are serve's flags. With none set, serve starts a usable
// single node on 127.0.0.1:7946 (gossip), :7947 (gRPC) and :7948 (HTTP).
type serveOptions struct {
	name, gossipAddr, advertiseAddr, grpcAddr, grpcAdvertise, httpAddr string
	join, profile, gossipKeyFile                                       string
	replicas                                                           int
	fallback                                                           string
	timeout, joinTimeout, shutdownTimeout                              time.Duration
	tlsCert, tlsKey, tlsCA, authTokenFile, peerTokenFile               string
	maxKeyBytes, maxBatch, maxKeys, maxCalls                           int
	maxLogUses                                                         int64
	logLevel, logFormat                                                string
	config, pprofAddr, envoyConfig                                     string
	traceKeys                                                          string
	envoyHeaders                                                       bool
	maxDescriptors                                                     int
	maxBodyBytes                                                       int64
	grpcReflection                                                     bool
	logKeys, logKeySecretFile                                          string
	logStalls                                                          time.Duration
	shadow                                                             bool
	leases                                                             bool
}

func serveFlags(o *serveOptions, out io.Writer) *flag.FlagSet {
	fs := newFlagSet("serve", "serve [flags]", out)
	fs.StringVar(&o.name, "name", "", "`NAME` of the node on the ring, unique in the cluster (default: host name and gRPC port)")
	fs.StringVar(&o.gossipAddr, "gossip-addr", ringlimit.DefaultGossipAddr, "gossip `HOST:PORT` (UDP and TCP)")
	fs.StringVar(&o.advertiseAddr, "advertise-addr", "", "gossip `HOST:PORT` the others use to reach this node, when it differs from --gossip-addr")
	fs.StringVar(&o.grpcAddr, "grpc-addr", ringlimit.DefaultGRPCAddr, "gRPC `HOST:PORT` (client API and peers)")
	fs.StringVar(&o.grpcAdvertise, "grpc-advertise", "", "gRPC `HOST:PORT` given to peers, when it differs from the bound one")
	fs.StringVar(&o.httpAddr, "http-addr", ringlimit.DefaultHTTPAddr, "HTTP `HOST:PORT` (JSON API, /healthz, /readyz, /metrics); - turns it off")
	fs.StringVar(&o.join, "join", "", "gossip `HOST:PORT[,HOST:PORT...]` (or DNS names) of nodes to join; empty starts a new cluster")
	fs.StringVar(&o.profile, "profile", "lan", "gossip timing `PROFILE`: lan or local (one host or a fast network: a crashed node is declared dead in about 1 s)")
	fs.StringVar(&o.gossipKeyFile, "gossip-key-file", "", "`FILE` holding the gossip encryption key: exactly 16, 24 or 32 bytes, or the base64 of such a key")
	fs.IntVar(&o.replicas, "replicas", ringlimit.DefaultReplicas, fmt.Sprintf("ring successors that receive each key's changes (`N`, 0 to %d; 0 turns replication off; with fewer other members, every other member)", ringlimit.MaxReplicas))
	fs.StringVar(&o.fallback, "fallback", "local", "`POLICY` for calls whose owner does not answer in --timeout: deny, allow or local")
	fs.BoolVar(&o.leases, "leases", true, "grant leases of hot keys this node owns to the callers that ask (fleet clients): they decide those calls in their own process, never past the limit (--leases=false: none)")
	fs.BoolVar(&o.shadow, "shadow", false, "shadow mode: count every call as usual but let it through; a call the limits refuse is answered allowed and shadowed (would have refused), counted in ringlimit_shadow_refusals_total and logged at most every 10 s")
	fs.DurationVar(&o.timeout, "timeout", ringlimit.DefaultTimeout, "longest a call waits for its key's owner before --fallback decides")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "certificate `FILE` of this node (mTLS for peers and clients; needs --tls-key and --tls-ca)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "private key `FILE` of --tls-cert")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "CA `FILE` every peer's and client's certificate must chain to")
	fs.StringVar(&o.authTokenFile, "auth-token-file", "", "`FILE` holding the bearer token the client API requires")
	fs.StringVar(&o.peerTokenFile, "peer-token-file", "", "`FILE` holding the cluster's peer token (the same on every node; at least 16 characters): the peer API refuses calls without it, whatever client certificate or token they show")
	fs.IntVar(&o.maxKeyBytes, "max-key-bytes", limiter.DefaultMaxKeyBytes, "longest key accepted, in `BYTES`")
	fs.IntVar(&o.maxBatch, "max-batch", limiter.DefaultMaxEntries, "most entries in one call (`N`)")
	fs.Int64Var(&o.maxLogUses, "max-log-uses", limiter.DefaultMaxLogUses, "largest Uses of a sliding-log limit (`N`)")
	fs.IntVar(&o.maxKeys, "max-keys", 0, "most live counters this node holds, the replicas it holds for other owners included (`N`; 0: no bound)")
	fs.IntVar(&o.maxCalls, "max-calls", ringlimit.DefaultMaxCalls, "most calls in one client API request (a Multi RPC or MultiStream message) (`N`)")
	fs.Int64Var(&o.maxBodyBytes, "max-body-bytes", ringlimit.DefaultMaxBodyBytes, "longest body of a JSON API request, in `BYTES` (longer: 413)")
	fs.BoolVar(&o.grpcReflection, "grpc-reflection", true, "serve gRPC server reflection, so grpcurl and similar tools need no .proto (--grpc-reflection=false turns it off)")
	fs.DurationVar(&o.joinTimeout, "join-timeout", ringlimit.DefaultJoinTimeout, "give up (exit 4) when no --join node answers within this")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "on SIGINT/SIGTERM, longest the hand-off and leave may take")
	fs.StringVar(&o.traceKeys, "trace-keys", "", "`KEYS` (comma list) whose every admitted use, hand-off step and ring change the node logs at info: a debugging aid for counts that went wrong")
	fs.DurationVar(&o.logStalls, "log-stalls", 0, "log (warn) each time the node's process was not scheduled for longer than `DURATION`, the cause of late answers on a shared machine (0: off)")
	fs.StringVar(&o.logLevel, "log-level", "info", "`LEVEL`: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "`FORMAT` of the logs on stderr: text or json")
	fs.StringVar(&o.logKeys, "log-keys", "hashed", "how log lines write a key, `MODE`: hashed (key_hash=, HMAC-SHA256) or plain (key=); --trace-keys lines write the keys traced")
	fs.StringVar(&o.logKeySecretFile, "log-key-secret-file", "", "`FILE` holding the secret (at least 32 bytes) of hashed log keys, the same on every node so their lines correlate (default: random per process)")
	fs.StringVar(&o.config, "config", "", "YAML `FILE` whose keys are these flags' names (gossip-addr: ...); unknown keys are errors")
	fs.StringVar(&o.pprofAddr, "pprof", "", "serve net/http/pprof on `HOST:PORT` (off by default; never expose it publicly)")
	fs.StringVar(&o.envoyConfig, "envoy-config", "", "envoy ratelimit YAML `FILE` or directory: serve Envoy's rate-limit service on the gRPC port (reloaded when it changes, a Kubernetes ConfigMap update included)")
	fs.BoolVar(&o.envoyHeaders, "envoy-response-headers", false, "add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset to Envoy's answers (response_headers_to_add), as envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED")
	fs.IntVar(&o.maxDescriptors, "max-descriptors", rls.DefaultMaxDescriptors, "most descriptors in one Envoy ShouldRateLimit request (`N`)")
	return fs
}

// nodeConfig turns the options into the node's Config, reading the files
// they name.
func (o *serveOptions) nodeConfig(log *slog.Logger) (ringlimit.Config, error) {
	cfg := ringlimit.Config{
		Name: o.name, GossipAddr: o.gossipAddr, AdvertiseAddr: o.advertiseAddr,
		GRPCAddr: o.grpcAddr, GRPCAdvertise: o.grpcAdvertise, HTTPAddr: o.httpAddr,
		Join: splitList(o.join), Profile: o.profile, Timeout: o.timeout, JoinTimeout: o.joinTimeout,
		Bounds: limiter.Bounds{MaxKeyBytes: o.maxKeyBytes, MaxEntries: o.maxBatch, MaxLogUses: o.maxLogUses, MaxKeys: o.maxKeys},
		Logger: log,
	}
	cfg.MaxCalls = o.maxCalls
	cfg.Shadow = o.shadow
	cfg.Leases = &o.leases
	cfg.MaxBodyBytes, cfg.NoGRPCReflection = o.maxBodyBytes, !o.grpcReflection
	switch {
	case o.replicas < 0:
		return cfg, usagef("--replicas: must be 0 (off) or more, got %d", o.replicas)
	case o.replicas > ringlimit.MaxReplicas:
		return cfg, usagef("--replicas: at most %d (each replica gets every write and holds a copy of the keys), got %d", ringlimit.MaxReplicas, o.replicas)
	case o.replicas == 0:
		cfg.Replicas = -1 // Config reads negative as off, 0 as its default
	default:
		cfg.Replicas = o.replicas
	}
	p, err := fallback.ParsePolicy(o.fallback)
	if err != nil {
		return cfg, usagef("--fallback: %q is not deny, allow or local", o.fallback)
	}
	cfg.Fallback, cfg.FallbackSet = p, true
	if o.timeout <= 0 {
		return cfg, usagef("--timeout: must be positive, got %v", o.timeout)
	}
	if o.joinTimeout <= 0 {
		return cfg, usagef("--join-timeout: must be positive, got %v", o.joinTimeout)
	}
	for _, b := range []struct {
		flag string
		v    int64
	}{{"max-key-bytes", int64(o.maxKeyBytes)}, {"max-batch", int64(o.maxBatch)}, {"max-log-uses", o.maxLogUses}, {"max-calls", int64(o.maxCalls)}} {
		if b.v < 1 {
			return cfg, usagef("--%s: must be at least 1, got %d", b.flag, b.v)
		}
	}
	if o.maxKeys < 0 {
		return cfg, usagef("--max-keys: must be 0 (no bound) or more, got %d", o.maxKeys)
	}
	if o.maxBodyBytes < 1 {
		return cfg, usagef("--max-body-bytes: must be at least 1, got %d", o.maxBodyBytes)
	}
	if o.gossipKeyFile != "" {
		if cfg.GossipKey, err = readGossipKey(o.gossipKeyFile); err != nil {
			return cfg, err
		}
	}
	cfg.TraceKeys = splitList(o.traceKeys)
	if cfg.LogPlainKeys, cfg.LogKeySecret, err = o.logKeyOptions(); err != nil {
		return cfg, err
	}
	cfg.LogStalls = o.logStalls
	cfg.Security = ringlimit.Security{CertFile: o.tlsCert, KeyFile: o.tlsKey, CAFile: o.tlsCA}
	if o.authTokenFile != "" {
		if cfg.Security.AuthToken, err = readToken("--auth-token-file", o.authTokenFile); err != nil {
			return cfg, err
		}
	}
	if o.peerTokenFile != "" {
		if cfg.PeerToken, err = readToken("--peer-token-file", o.peerTokenFile); err != nil {
			return cfg, err
		}
	}
	if o.maxDescriptors < 1 {
		return cfg, usagef("--max-descriptors: must be at least 1, got %d", o.maxDescriptors)
	}
	if o.envoyConfig != "" {
		ec, err := rls.Load(o.envoyConfig)
		if err != nil {
			return cfg, usagef("--envoy-config: %w", err)
		}
		ec.ResponseHeaders, ec.MaxDescriptors = o.envoyHeaders, o.maxDescriptors
		cfg.Envoy = &ec
	}
	return cfg, nil
}

// logKeyOptions reads --log-keys and --log-key-secret-file.
func (o *serveOptions) logKeyOptions() (plain bool, secret []byte, err error) {
	mode, err := logkey.ParseMode(o.logKeys)
	if err != nil {
		return false, nil, usagef("--log-keys: %q is not hashed or plain", o.logKeys)
	}
	if o.logKeySecretFile == "" {
		return mode == logkey.Plain, nil, nil
	}
	if mode == logkey.Plain {
		return false, nil, usagef("--log-key-secret-file: is for --log-keys hashed, not plain")
	}
	b, err := os.ReadFile(o.logKeySecretFile)
	if err != nil {
		return false, nil, usagef("--log-key-secret-file: %w", err)
	}
	b = []byte(strings.TrimSpace(string(b)))
	if len(b) < logkey.MinSecret {
		return false, nil, usagef("--log-key-secret-file: %s holds %d bytes; want at least %d (e.g. openssl rand -base64 32)", o.logKeySecretFile, len(b), logkey.MinSecret)
	}
	return false, b, nil
}

// readGossipKey reads the gossip key: a file of exactly 16, 24 or 32 bytes
// (surrounding white space trimmed) is the key itself; otherwise it must be
// the base64 of such a key (as `openssl rand -base64 32` writes it).
func readGossipKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--gossip-key-file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if validKeyLen(len(s)) {
		return []byte(s), nil
	}
	if k, err := base64.StdEncoding.DecodeString(s); err == nil && validKeyLen(len(k)) {
		return k, nil
	}
	return nil, usagef("--gossip-key-file: %s holds %d bytes; want a 16, 24 or 32 byte key, raw or base64", path, len(s))
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }

// readToken reads a bearer token file (surrounding white space trimmed).
// readToken reads a token file given to flag; the token is its content
// without surrounding white space.
func readToken(flag, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usagef("%s: %w", flag, err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", usagef("%s: %s is empty", flag, path)
	}
	return t, nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level: %q is not debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format: %q is not text or json", format)
}

func runServe(ctx context.Context, e *env, args []string) error {
	var o serveOptions
	fs := serveFlags(&o, e.stderr)
	if err := parse(fs, args, e.getenv, "config"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	log, err := newLogger(e.stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	cfg, err := o.nodeConfig(log)
	if err != nil {
		return err
	}
	// A node must never die because its log pipe closed (the reader of
	// its stderr exited: `make cluster`'s prefixer on Ctrl-C, a closed
	// terminal). Go's runtime kills a process that writes to a broken
	// fd 1 or 2 unless SIGPIPE is ignored; then the write fails with
	// EPIPE, slog drops the line, and the hand-off and leave go on.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if e.getenv("GOGC") == "" {
		// A node's garbage is mostly per-RPC messages over a small live
		// set (its counters): collecting at 5x the live heap rather than
		// 2x cut its GC work (bench: ~10% of a node's CPU) and p99. GOGC,
		// when set, decides.
		debug.SetGCPercent(serveGCPercent)
	}
	if o.pprofAddr != "" {
		closePprof, err := servePprof(o.pprofAddr, log)
		if err != nil {
			return fatal(log, exitBind, "ringlimit: cannot bind --pprof", err)
		}
		defer closePprof()
	}
	node, err := ringlimit.Start(ctx, cfg)
	if err != nil {
		return startFailed(log, err)
	}
	closeNode := func() error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
		defer cancel()
		return node.Close(cctx)
	}
	if err := waitJoined(ctx, node, o.joinTimeout, log); err != nil {
		closeNode()
		if ctx.Err() != nil {
			log.Info("ringlimit: stopped before joining")
			return nil
		}
		return err
	}
	if svc := node.Envoy(); svc != nil {
		stopWatch, err := svc.Watch(ctx, log, o.envoyConfig)
		if err != nil {
			closeNode()
			return fmt.Errorf("--envoy-config: %w", err)
		}
		defer stopWatch()
	}
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); watchMembers(ctx, node, log) }()
	<-ctx.Done()
	stop() // a second signal kills the process at once
	log.Info("ringlimit: shutting down: hand-off, then leave", "name", node.Name(), "deadline", o.shutdownTimeout)
	err = closeNode()
	<-watchDone
	if err != nil {
		return fatal(log, exitFailed, "ringlimit: shutdown incomplete", err)
	}
	log.Info("ringlimit: stopped", "name", node.Name())
	return nil
}

// fatal logs why serve stops (once: run prints nothing more) and gives the
// error its exit code.
func fatal(log *slog.Logger, code int, msg string, err error) error {
	log.Error(msg, "err", err, "exit", code)
	return &exitError{code: code, err: err, reported: true}
}

// startFailed classifies an error of ringlimit.Start: a port that cannot
// be bound, a bad setting (a TLS file, an Envoy rule), or anything else.
func startFailed(log *slog.Logger, err error) error {
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "listen":
		return fatal(log, exitBind, "ringlimit: cannot bind", err)
	case errors.Is(err, limiter.ErrInvalid), errors.Is(err, cluster.ErrInvalidConfig):
		return fatal(log, exitUsage, "ringlimit: invalid configuration", err)
	}
	return fatal(log, exitFailed, "ringlimit: cannot start", err)
}

// waitJoined waits until the node has joined its cluster (it logs "node
// ready" itself), joining failed, or timeout passed. A failure to join
// (or to bind the gossip address, which happens while joining) the node
// has logged already.
func waitJoined(ctx context.Context, node *ringlimit.Node, timeout time.Duration, log *slog.Logger) error {
	// The node gives up joining after timeout itself; this deadline is a
	// backstop should it not.
	deadline := time.Now().Add(timeout + 5*time.Second)
	for {
		// Short waits, so an early join failure (a gossip port in use)
		// is reported at once rather than after the whole timeout.
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := node.WaitReady(wctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, ringlimit.ErrNotReady):
			code := exitFailed
			switch {
			case errors.Is(err, cluster.ErrBind):
				code = exitBind
			case errors.Is(err, cluster.ErrJoin):
				code = exitJoin
			case errors.Is(err, cluster.ErrInvalidConfig):
				code = exitUsage
			}
			return &exitError{code: code, err: err, reported: true}
		case time.Now().After(deadline):
			return fatal(log, exitJoin, "ringlimit: could not join the cluster", fmt.Errorf("not joined within --join-timeout %v: %w", timeout, err))
		}
	}
}

// watchMembers logs members as they come and go (and change state), by
// name, until ctx is done.
func watchMembers(ctx context.Context, node *ringlimit.Node, log *slog.Logger) {
	// The members known already when the watch starts joined too (on a
	// busy machine a peer can join before the first look): log them as
	// joined, not only those that come after.
	seen := map[string]string{}
	for _, m := range node.Members() {
		seen[m.Name] = m.State
		if m.Name != node.Name() {
			log.Info("ringlimit: member joined", "member", m.Name, "gossip", m.GossipAddr, "grpc", m.GRPCAddr, "state", m.State)
		}
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := map[string]string{}
		for _, m := range node.Members() {
			now[m.Name] = m.State
			switch old, ok := seen[m.Name]; {
			case !ok:
				log.Info("ringlimit: member joined", "member", m.Name, "gossip", m.GossipAddr, "grpc", m.GRPCAddr, "state", m.State)
			case old != m.State:
				log.Info("ringlimit: member changed state", "member", m.Name, "from", old, "to", m.State)
			}
		}
		for name := range seen {
			if _, ok := now[name]; !ok {
				log.Info("ringlimit: member forgotten", "member", name)
			}
		}
		seen = now
	}
}

// servePprof serves net/http/pprof on its own listener. (The node's HTTP
// server is the node's own; it has no hook for extra handlers.)
func servePprof(addr string, log *slog.Logger) (func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	log.Info("ringlimit: pprof serving", "addr", lis.Addr().String())
	return func() { _ = srv.Close() }, nil
}
