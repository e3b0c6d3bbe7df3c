package ringlimit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/internal/codec"
	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/internal/logkey"
	"github.com/ringlimit/ringlimit/internal/sabotage"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rls"
	"github.com/ringlimit/ringlimit/rpc"
	"github.com/ringlimit/ringlimit/rpc/api"
	"github.com/ringlimit/ringlimit/rpc/peer"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Node is an embedded ringlimit node. It is a limiter.Store: calls go to
// each key's owner in the cluster, and the fallback policy answers when an
// owner does not answer in time.
type Node struct {
	cfg      Config
	log      *slog.Logger
	engine   *limiter.Memory
	router   *owner.Router
	peers    *peer.Client
	peerSrv  *peer.Server
	holder   *leasehold.Holder // nil: leases off (nodelease.go)
	fb       *fallback.Store
	front    limiter.Store // what callers reach: fb, or fb in shadow mode (Config.Shadow)
	members  *cluster.Routing
	api      *api.Server // the client API: gRPC, JSON, health
	metrics  *metrics
	health   *api.Health
	grpcSrv  *grpc.Server
	grpcLis  net.Listener
	httpSrv  *http.Server
	httpLis  net.Listener
	ready    chan struct{}
	joinErr  error
	joinFail chan struct{} // closed after joinErr is set
	stopJoin context.CancelFunc
	envoy    *rls.Service // nil unless Config.Envoy
	unsub    func()
	wg       sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
	closing   chan struct{}
}

var _ limiter.Store = (*Node)(nil)

// ErrNotReady is the cause (in Verdict.Failure) of a call that waited
// Timeout for the node to join its cluster: the failure policy decided
// it. WaitReady returns it too.
var ErrNotReady error = notReadyError{}

// Start starts a node: it binds the gRPC and HTTP listeners at once (an
// error if it cannot), then joins the cluster in the background. Calls
// made before the node has joined wait for it, bounded by Timeout, and
// then meet the failure policy (Fallback); Ready is closed once it has
// joined. Close stops it.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger, ready: make(chan struct{}), joinFail: make(chan struct{}), closing: make(chan struct{})}
	n.api, err = api.New(api.Config{Node: apiNode{n}, MaxCalls: cfg.MaxCalls, MaxBodyBytes: cfg.MaxBodyBytes, Timeout: DefaultTimeout, Clock: cfg.Clock})
	if err != nil {
		return nil, err
	}
	if s := sabotage.Active(); len(s) > 0 {
		n.log.Warn("ringlimit: TEST-ONLY sabotage is on: a protection is deliberately broken; never run like this", "env", sabotage.Env, "switches", s)
	}
	creds, err := serverCreds(cfg.Security)
	if err != nil {
		return nil, err
	}
	httpTLS, err := httpTLSConfig(cfg.Security)
	if err != nil {
		return nil, err
	}
	n.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("ringlimit: bind gRPC %s: %w", cfg.GRPCAddr, err)
	}
	grpcAddr := n.grpcLis.Addr().String()
	if cfg.Name == "" {
		cfg.Name = defaultName(grpcAddr)
		n.cfg.Name = cfg.Name
	}
	if cfg.HTTPAddr != "-" {
		n.httpLis, err = net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			n.grpcLis.Close()
			return nil, fmt.Errorf("ringlimit: bind HTTP %s: %w", cfg.HTTPAddr, err)
		}
	}
	n.engine = limiter.NewMemory(limiter.MemoryConfig{Clock: cfg.Clock, Bounds: cfg.Bounds})
	n.members = cluster.NewRouting()
	peers := peerAuth{token: cfg.PeerToken}
	if w := openPeerWarning(cfg.PeerToken, n.grpcLis.Addr()); w != "" {
		n.log.Warn(w)
	}
	dial, err := dialer(cfg.Security, peers)
	if err != nil {
		n.closeListeners()
		return nil, err
	}
	logMode := logkey.Hashed
	if cfg.LogPlainKeys {
		logMode = logkey.Plain
	}
	logKeys, err := logkey.New(logMode, cfg.LogKeySecret)
	if err != nil { // withDefaults checked the secret
		n.closeListeners()
		return nil, &limiter.InputError{Field: "LogKeySecret", Reason: err.Error()}
	}
	n.peers, err = peer.NewClient(peer.ClientConfig{
		Self: cfg.Name, Members: n.members, Dial: dial, ForwardTimeout: cfg.Timeout, Logger: cfg.Logger,
		RingVersion: func() uint64 { return n.router.RoutingRing().Version() },
		Late: func(ctx context.Context, sentTo string, rs []owner.Receipt, elapsed time.Duration) error {
			return n.router.ReleaseAt(ctx, sentTo, rs, elapsed)
		},
	})
	if err != nil {
		n.closeListeners()
		return nil, err
	}
	n.router, err = owner.New(owner.Config{
		Self: cfg.Name, SelfAddr: advertiseOf(cfg, grpcAddr), Members: n.members, Engine: n.engine, Peers: n.peers,
		Replication: cfg.Replicas, ForwardTimeout: cfg.Timeout, FetchTimeout: cfg.Timeout * 4 / 5,
		Bounds: cfg.Bounds, Logger: cfg.Logger, Invalidated: n.invalidated, LogKeys: logKeys,
	})
	if err != nil {
		n.closeListeners()
		return nil, err
	}
	leases := cfg.Leases == nil || *cfg.Leases
	if leases {
		n.router.EnableLeases(owner.LeaseConfig{}, n.recallLeases)
	}
	n.members.SetConn(n.peers.Conn)
	if len(cfg.TraceKeys) > 0 {
		n.router.SetTrace(traceLogger(cfg.Logger, cfg.TraceKeys))
	}
	n.fb, err = fallback.New(readyGate{n}, fallback.Config{
		Timeout: cfg.Timeout, Policy: cfg.Fallback, Bounds: cfg.Bounds, Logger: cfg.Logger,
		Clock: cfg.Clock, KeepStoreOpen: true,
		// The router keeps to its context and releases what a caller gave
		// up on, so the policy can run in the caller's goroutine.
		Inline: true,
		Share:  func() int { return max(n.members.Ring().Len(), 1) },
	})
	if err != nil {
		n.closeListeners()
		return nil, err
	}
	n.front = n.fb
	if cfg.Shadow {
		n.front = limiter.Shadow(n.fb, limiter.ShadowLogger(cfg.Logger), limiter.ShadowClock(cfg.Clock), limiter.ShadowLogKeys(logKeys.Attr))
	}
	n.metrics = newMetrics(n)
	if cfg.Registerer != nil {
		for _, c := range n.metrics.collectors {
			if err := cfg.Registerer.Register(c); err != nil {
				n.closeListeners()
				return nil, fmt.Errorf("ringlimit: register metrics: %w", err)
			}
		}
	}
	unaryGuard, streamGuard := nodeGuard(peers, cfg.Security).interceptors()
	opts := append(creds, grpc.UnaryInterceptor(unaryGuard), grpc.StreamInterceptor(streamGuard),
		// Serve streams on reused goroutines: a fresh goroutine per RPC
		// grows its stack through the handler's call chain every time
		// (runtime.copystack was ~7% of a node's CPU under bench).
		grpc.NumStreamWorkers(streamWorkers()))
	opts = append(opts, windowServerOptions...)
	// vtproto's generated code instead of protobuf reflection, for this
	// server only (same wire encoding; internal/codec).
	opts = append(opts, codec.ServerOption())
	n.grpcSrv = grpc.NewServer(opts...)
	n.api.Register(n.grpcSrv)
	n.peerSrv = peer.NewServer(n.router, n.peers)
	pb.RegisterPeerServer(n.grpcSrv, n.peerSrv)
	if cfg.Envoy != nil {
		ec := *cfg.Envoy
		if ec.Clock == nil {
			ec.Clock = cfg.Clock
		}
		// Envoy's process-wide SHADOW_MODE: the store's shadowed verdicts
		// give the same answers, and this turns OK the refusals that never
		// reach it too (requests_per_unit 0).
		ec.ShadowMode = ec.ShadowMode || cfg.Shadow
		svc, err := rls.New(n, ec) // validated by withDefaults
		if err != nil {
			n.closeListeners()
			return nil, fmt.Errorf("ringlimit: Envoy: %w", err)
		}
		svc.Register(n.grpcSrv)
		n.envoy = svc
		n.metrics.reg.MustRegister(svc.Collector())
		if cfg.Registerer != nil {
			if err := cfg.Registerer.Register(svc.Collector()); err != nil {
				n.closeListeners()
				return nil, fmt.Errorf("ringlimit: register metrics: %w", err)
			}
		}
	}
	if leases { // last: nothing below fails, so the holder's task never leaks
		n.startHolder() // nodelease.go
	}
	n.health = n.api.Health(n.grpcSrv)
	if !cfg.NoGRPCReflection {
		reflection.Register(n.grpcSrv) // grpcurl and friends, no .proto needed
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.grpcSrv.Serve(n.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("ringlimit: gRPC server stopped", "err", err)
		}
	}()
	if n.httpLis != nil {
		n.httpSrv = &http.Server{Handler: n.httpHandler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: httpTLS,
			// Failed handshakes (scanners, plaintext requests to the TLS
			// port) are the callers' problem: debug, not the stderr log.
			ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelDebug)}
		lis := n.httpLis
		if httpTLS != nil {
			lis = tls.NewListener(lis, httpTLS)
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.httpSrv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("ringlimit: HTTP server stopped", "err", err)
			}
		}()
	}
	advertise := cfg.GRPCAdvertise
	if advertise == "" {
		advertise = grpcAddr
	}
	if cfg.LogStalls > 0 {
		n.wg.Add(1)
		go n.watchStalls(cfg.LogStalls)
	}
	joinCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.JoinTimeout)
	n.stopJoin = cancel
	n.wg.Add(1)
	go n.join(joinCtx, cluster.Config{
		Name: cfg.Name, GossipAddr: cfg.GossipAddr, AdvertiseAddr: cfg.AdvertiseAddr, GRPCAddr: advertise,
		Join: cfg.Join, Profile: cfg.Profile, SecretKey: cfg.GossipKey, Logger: cfg.Logger,
	})
	return n, nil
}

func (n *Node) join(ctx context.Context, cc cluster.Config) {
	defer n.wg.Done()
	defer n.stopJoin()
	c, err := cluster.Start(ctx, cc)
	if err != nil {
		// Logged before the failure is told: a waiter (serve) exits on it
		// at once, and counts on the line being written.
		select {
		case <-n.closing: // Close cut the join short: no failure to report
		default:
			msg := "ringlimit: could not join the cluster"
			if errors.Is(err, cluster.ErrBind) {
				msg = "ringlimit: could not bind the gossip address"
			}
			n.log.Error(msg, "err", err)
		}
		n.joinErr = err
		close(n.joinFail)
		return
	}
	select {
	case <-n.closing:
		c.Close()
		return
	default:
	}
	n.members.Set(c)
	n.members.StartProbing(context.WithoutCancel(ctx), c)
	changes, unsub := c.Subscribe()
	n.unsub = unsub
	// The first ring is routed before the node says it is ready.
	var last *ring.Ring
	if first, ok := <-changes; ok {
		n.router.RingChanged(first.Prev, first.Next)
		last = first.Next
	}
	ringChanges := make(chan owner.RingChange, 16)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer close(ringChanges)
		for {
			select {
			case ch, ok := <-changes:
				if !ok {
					return
				}
				n.log.Info("ringlimit: members changed", "ring", ch.Next.String())
				ringChanges <- owner.RingChange{Prev: ch.Prev, Next: ch.Next}
				last = ch.Next
			case <-n.members.Flips():
				// The majority verdict changed with no ring change (a
				// member stopped or started answering probes): re-route
				// the same live ring, so the routing ring follows the
				// verdict with the transition and hand-off of any change
				// of the routing ring. RingChanged does nothing when the
				// routing ring stays the same (no member is down).
				if last != nil {
					rg, lvl := n.members.Route(last), slog.LevelDebug
					if rg.Version() != last.Version() {
						lvl = slog.LevelInfo // routing by all known members
					}
					n.log.Log(context.Background(), lvl, "ringlimit: majority verdict changed", "ring", last.String(), "routing", rg.String())
					select {
					case ringChanges <- owner.RingChange{Prev: last, Next: last}:
					default: // ring changes are pending: each routes by the verdict then current
					}
				}
			}
		}
	}()
	n.router.Run(ringChanges)
	n.health.Set(healthpb.HealthCheckResponse_SERVING)
	close(n.ready)
	n.log.Info("ringlimit: node ready", "name", n.cfg.Name, "grpc", n.GRPCAddr(), "http", n.HTTPAddr(), "gossip", c.Local().GossipAddr)
}

// Ready is closed once the node has joined its cluster.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// WaitReady waits until the node has joined, ctx is done, or joining
// failed.
func (n *Node) WaitReady(ctx context.Context) error {
	select {
	case <-n.ready:
		return nil
	case <-n.joinFail:
		return n.joinErr
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
	}
}

// Name is the node's name on the ring.
func (n *Node) Name() string { return n.cfg.Name }

// GRPCAddr is the bound gRPC address.
func (n *Node) GRPCAddr() string { return n.grpcLis.Addr().String() }

// HTTPAddr is the bound HTTP address, or "" when HTTP is off.
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

// GossipAddr is the gossip address the node advertises ("" before it
// joined).
func (n *Node) GossipAddr() string {
	if c := n.members.Cluster(); c != nil {
		return c.Local().GossipAddr
	}
	return ""
}

// Members returns the cluster's members as this node sees them.
func (n *Node) Members() []cluster.Member {
	if c := n.members.Cluster(); c != nil {
		return c.Members()
	}
	return nil
}

// Owner returns the name of the member that owns key. An empty key, or
// one past the key bound, is an *limiter.InputError naming "key", as a
// call with it would be: no call could count it, so it has no owner.
func (n *Node) Owner(key string) (string, error) {
	if key == "" {
		return "", &limiter.InputError{Field: "key", Reason: "must not be empty"}
	}
	if len(key) > n.cfg.Bounds.MaxKeyBytes {
		return "", &limiter.InputError{Field: "key", Reason: fmt.Sprintf("%d bytes, longer than the bound of %d", len(key), n.cfg.Bounds.MaxKeyBytes), Bound: true}
	}
	return n.members.Ring().Owner(key)
}

// Envoy returns the node's Envoy rate-limit service, nil unless
// Config.Envoy is set: Reload or Watch it to change its rules.
func (n *Node) Envoy() *rls.Service { return n.envoy }

// Router exposes the node's router (stats, engine) for tests and metrics.
func (n *Node) Router() *owner.Router { return n.router }

// Peers returns the node's gRPC end of the peer protocol: its forward
// counters, per peer too (for tests and metrics).
func (n *Node) Peers() *peer.Client { return n.peers }

// Fallback exposes the failure-policy wrapper (its stats).
func (n *Node) Fallback() *fallback.Store { return n.fb }

// advertiseOf is the gRPC address peers reach this node at.
func advertiseOf(cfg Config, bound string) string {
	if cfg.GRPCAdvertise != "" {
		return cfg.GRPCAdvertise
	}
	return bound
}

func (n *Node) isClosing() bool {
	select {
	case <-n.closing:
		return true
	default:
		return false
	}
}

func closedContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// waitReady bounds a call's wait for readiness by Timeout.
func (n *Node) waitReady(ctx context.Context) error {
	select {
	case <-n.ready:
		return nil
	default:
	}
	t := time.NewTimer(n.cfg.Timeout)
	defer t.Stop()
	select {
	case <-n.ready:
		return nil
	case <-t.C:
		return ErrNotReady
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ConsumeMany checks and records a batch at its owners, all or nothing.
func (n *Node) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	start := time.Now()
	if n.isClosing() {
		return limiter.Verdict{}, rpc.ErrShuttingDown
	}
	v, err := n.front.ConsumeMany(ctx, entries)
	n.metrics.observe(entries, v, err, start)
	return v, err
}

var _ limiter.CallsStore = (*Node)(nil)

// Calls decides independent calls (limiter.CallsStore), each as
// ConsumeMany or PeekMany would: the calls for one owner travel to it
// together, in one message.
func (n *Node) Calls(ctx context.Context, calls []limiter.Call, out []limiter.CallResult) {
	start := time.Now()
	if n.isClosing() {
		for i := range out {
			out[i] = limiter.CallResult{Err: rpc.ErrShuttingDown}
		}
		return
	}
	limiter.DecideCalls(ctx, n.front, calls, out)
	for i := range calls {
		if !calls[i].Peek {
			n.metrics.observe(calls[i].Entries, out[i].Verdict, out[i].Err, start)
		}
	}
}

// PeekMany answers what ConsumeMany would, recording nothing.
func (n *Node) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	if n.isClosing() {
		return limiter.Verdict{}, rpc.ErrShuttingDown
	}
	return n.front.PeekMany(ctx, entries)
}

// Close stops the node gracefully within ctx's deadline: it stops taking
// calls (new ones get an error matching rpc.ErrShuttingDown), finishes
// those under way, hands off the keys it owns to their next owners, leaves
// the gossip, and closes its connections and listeners — in that order.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() {
		close(n.closing)
		n.stopJoin()
		n.health.Set(healthpb.HealthCheckResponse_NOT_SERVING)
		if n.holder != nil {
			// The leases this node holds go back while their owners and
			// the way to them are up.
			n.holder.Close()
		}
		var errs []error
		if c := n.members.Cluster(); c != nil && c.Ring().Len() > 1 {
			// Take this node off every ring first, its own included: keys
			// move to their next owners (hand-off) while this node still
			// answers forwards and fetches for them.
			if err := c.PrepareLeave(ctx); err != nil && !errors.Is(err, cluster.ErrClosed) {
				errs = append(errs, fmt.Errorf("announce leave: %w", err))
			}
			n.router.AwaitQuiet(ctx, 200*time.Millisecond, 3*time.Second)
		}
		if err := n.router.Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drain: %w", err))
		}
		if c := n.members.Cluster(); c != nil {
			if err := c.Leave(ctx); err != nil && !errors.Is(err, cluster.ErrClosed) {
				errs = append(errs, fmt.Errorf("leave: %w", err))
			}
		}
		if err := n.fb.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("fallback: %w", err))
		}
		n.router.Close()
		n.peers.Close()
		n.members.StopProbing()
		n.shutdownServers(ctx)
		n.wg.Wait()
		if n.unsub != nil {
			n.unsub()
		}
		n.engine.Close()
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

func (n *Node) shutdownServers(ctx context.Context) {
	if n.httpSrv != nil {
		_ = n.httpSrv.Shutdown(ctx)
	}
	n.api.EndStreams()     // health Watch and MultiStream streams alike
	n.peerSrv.EndStreams() // peers' ForwardStreams, once answered
	stopped := make(chan struct{})
	go func() { n.grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		n.grpcSrv.Stop()
		<-stopped
	}
	n.api.WaitStreams()
}

func (n *Node) closeListeners() {
	n.grpcLis.Close()
	if n.httpLis != nil {
		n.httpLis.Close()
	}
}

// streamWorkers is the number of gRPC stream workers of a node: enough for
// the RPCs usually concurrent on it (a client's batch per node, peers'
// forwards and replication); more spawn a goroutine as before.
func streamWorkers() uint32 { return uint32(max(8, 2*runtime.GOMAXPROCS(0))) }

// traceLogger logs the router's trace events for keys (and its ring
// changes, which name no key).
func traceLogger(log *slog.Logger, keys []string) func(key, how string, ringVersion uint64) {
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	return func(key, how string, ringVersion uint64) {
		if key == "" || want[key] {
			log.Info("ringlimit: trace", "key", key, "event", how, "ring", fmt.Sprintf("%016x", ringVersion))
		}
	}
}

// The routing view is what the protocol core asks of membership.
var (
	_ owner.Membership   = (*cluster.Routing)(nil)
	_ owner.LeftReporter = (*cluster.Routing)(nil)
	_ owner.RouteRing    = (*cluster.Routing)(nil)
)
