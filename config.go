package ringlimit

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/internal/logkey"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

// Defaults of Config.
const (
	DefaultGossipAddr  = "127.0.0.1:7946"
	DefaultGRPCAddr    = "127.0.0.1:7947"
	DefaultHTTPAddr    = "127.0.0.1:7948"
	DefaultTimeout     = 250 * time.Millisecond
	DefaultReplicas    = 1
	DefaultJoinTimeout = 30 * time.Second
	DefaultMaxCalls    = 1024
	// DefaultMaxBodyBytes bounds a JSON API request body: 1 MiB.
	DefaultMaxBodyBytes = 1 << 20
	// MaxReplicas is the most Replicas accepted: every write is shipped to
	// each replica and every node holds Replicas+1 copies of its share of
	// the keys, so more copies than this only cost.
	MaxReplicas = 16
)

// Config configures a node. The zero value starts a usable single node on
// loopback defaults. Start never writes into the caller's Config.
type Config struct {
	// Name identifies the node on the ring; unique in the cluster. Default:
	// the host name and the gRPC port ("myhost-7947").
	Name string
	// GossipAddr is the host:port for membership gossip (UDP and TCP).
	// Default "127.0.0.1:7946"; port 0 picks a free one.
	GossipAddr string
	// AdvertiseAddr is the gossip host:port others use to reach this node,
	// when it differs from GossipAddr. Default: GossipAddr.
	AdvertiseAddr string
	// GRPCAddr is the host:port of the gRPC API (clients and peers).
	// Default "127.0.0.1:7947"; port 0 picks a free one.
	GRPCAddr string
	// GRPCAdvertise is the gRPC address given to peers, when it differs
	// from the bound one (binding 0.0.0.0). Default: the bound address.
	GRPCAdvertise string
	// HTTPAddr is the host:port of the JSON API, health and metrics.
	// Default "127.0.0.1:7948"; "-" turns it off; port 0 picks a free one.
	HTTPAddr string
	// Join lists gossip host:port addresses (or DNS names, re-resolved at
	// each re-join) of nodes to join. Empty: a new cluster.
	Join []string
	// Profile is the gossip timing preset, "lan" (default) or "local"
	// (one host or a fast network: a crashed node is declared dead in ~1 s).
	Profile string
	// GossipKey encrypts gossip (16, 24 or 32 bytes). Default: none.
	GossipKey []byte
	// Replicas is how many ring successors receive each key's changes, so
	// a crashed owner's counts survive. Default 1; negative turns
	// replication off; at most MaxReplicas (with fewer other members,
	// each key goes to every other member).
	Replicas int
	// Timeout is the longest a call waits for a key's owner (and, at
	// start, for the node to join) before Fallback decides. Default 250 ms.
	Timeout time.Duration
	// Fallback decides calls whose owner did not answer in time: Local
	// (default: count in this process with the limit shared across the
	// live members), Deny or Allow.
	Fallback fallback.Policy
	// FallbackSet marks Fallback as chosen; without it the default Local
	// applies (Fallback's zero value is Deny).
	FallbackSet bool
	// Shadow puts the node in shadow mode (see limiter.Shadow): every call
	// that enters it (Go, gRPC, JSON, Envoy) is counted as usual and let
	// through; one the limits refuse is answered allowed with Shadowed
	// set ("would have refused"), counted in
	// ringlimit_shadow_refusals_total and logged at most once every 10 s.
	// What the cluster records does not change. It applies where a call
	// enters: set it on every node. Envoy's rate-limit service (Envoy)
	// then runs in envoy's SHADOW_MODE (rls.Config.ShadowMode). Default
	// false.
	Shadow bool
	// Leases lets the node grant leases of keys it owns (issue #21): a
	// fleet client or an embedded caller that uses a key often gets up to
	// k of its uses to decide in its own process, without a round trip,
	// and gives back what it did not use; no window ever admits more than
	// the limit (README, Leases). nil means on (the default); point it at
	// false to turn leases off (--leases=false).
	Leases *bool
	// JoinTimeout bounds joining at start. Default 30 s.
	JoinTimeout time.Duration
	// Bounds on key size, batch size, sliding-log uses and keys held
	// (Bounds.MaxKeys counts live keys, the replicas this node holds
	// included).
	Bounds limiter.Bounds
	// MaxCalls is the most calls one client API request carries (a Multi
	// RPC or a MultiStream message); past it the request is refused with
	// ResourceExhausted naming "calls" (a MultiStream then ends). Keep the
	// fleet client's MaxBatch at or below it. Default 1024.
	MaxCalls int
	// MaxBodyBytes bounds the body of a JSON API request (POST /v1/...);
	// a longer one gets 413 naming "body". Default 1 MiB.
	MaxBodyBytes int64
	// NoGRPCReflection turns off gRPC server reflection
	// (grpc.reflection.v1), which lets tools such as grpcurl list and call
	// the services with no .proto at hand. Default false: served.
	NoGRPCReflection bool
	// Clock reads the engine's time. Default: the process monotonic clock.
	Clock limiter.Clock
	// Logger receives the node's logs. Default slog.Default().
	Logger *slog.Logger
	// LogPlainKeys makes log lines that name a key write it as it is
	// (key=...). Default false: hashed, key_hash= the first 128 bits of
	// HMAC-SHA256(LogKeySecret, key) in hex, as store/redis writes keys.
	// TraceKeys lines always write the keys traced.
	LogPlainKeys bool
	// LogKeySecret keys the HMAC of hashed log keys: at least 32 bytes,
	// the same on every node so their lines correlate. Default: a random
	// secret per process (lines correlate within one process only).
	LogKeySecret []byte
	// Security holds TLS and token settings; zero means plaintext.
	Security Security
	// PeerToken is the cluster's secret that tells a peer from a client:
	// every node presents it on its calls to the peer API
	// (ringlimit.v1.Peer), and refuses peer calls without it
	// (Unauthenticated) or with another one (PermissionDenied), whatever
	// client certificate or bearer token they show. At least
	// MinPeerTokenLen visible ASCII characters; the same on every node.
	// Default none: the peer API is open to anyone who reaches the gRPC
	// port, and a node bound beyond loopback warns at start.
	PeerToken string
	// TraceKeys are keys whose every admitted use (local or forwarded),
	// hand-off and first-use fetch step, and every ring change, the node
	// logs at info ("ringlimit: trace"). A debugging aid for a count that
	// went wrong: it costs a lock-free check per admitted use when empty.
	// Default none.
	TraceKeys []string
	// LogStalls, when > 0, makes the node log ("ringlimit: process
	// stalled", at warn) each time its process was not scheduled for
	// longer than this: on a shared machine, the cause of answers later
	// than Timeout. Default 0 (off).
	LogStalls time.Duration
	// Registerer, when set, gets the node's Prometheus collectors (an
	// embedding host's registry). The node's /metrics serves them anyway.
	Registerer prometheus.Registerer
	// Envoy, when set, serves Envoy's rate-limit service
	// (envoy.service.ratelimit.v3.RateLimitService) on the gRPC port with
	// these rules, counting in this node (see package rls). Default nil:
	// off.
	Envoy *rls.Config
}

func (c Config) withDefaults() (Config, error) {
	if c.GossipAddr == "" {
		c.GossipAddr = DefaultGossipAddr
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = DefaultGRPCAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.Profile == "" {
		c.Profile = cluster.ProfileLAN
	}
	if c.Profile != cluster.ProfileLAN && c.Profile != cluster.ProfileLocal {
		return c, &limiter.InputError{Field: "Profile", Reason: fmt.Sprintf("unknown profile %q (want lan or local)", c.Profile)}
	}
	switch {
	case c.Replicas == 0:
		c.Replicas = DefaultReplicas
	case c.Replicas < 0:
		c.Replicas = 0
	case c.Replicas > MaxReplicas:
		return c, &limiter.InputError{Field: "Replicas", Reason: fmt.Sprintf("at most %d, got %d", MaxReplicas, c.Replicas)}
	}
	if c.Timeout < 0 {
		return c, &limiter.InputError{Field: "Timeout", Reason: "must not be negative"}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if !c.FallbackSet {
		c.Fallback = fallback.Local
	}
	if !c.Fallback.Valid() {
		return c, &limiter.InputError{Field: "Fallback", Reason: fmt.Sprintf("unknown policy %d", c.Fallback)}
	}
	switch {
	case c.MaxBodyBytes < 0:
		return c, &limiter.InputError{Field: "MaxBodyBytes", Reason: fmt.Sprintf("must not be negative, got %d", c.MaxBodyBytes)}
	case c.MaxBodyBytes == 0:
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = DefaultJoinTimeout
	}
	if err := validatePeerToken(c.PeerToken); err != nil {
		return c, err
	}
	switch {
	case c.MaxCalls < 0:
		return c, &limiter.InputError{Field: "MaxCalls", Reason: fmt.Sprintf("must not be negative, got %d", c.MaxCalls)}
	case c.MaxCalls == 0:
		c.MaxCalls = DefaultMaxCalls
	}
	if n := len(c.LogKeySecret); n > 0 && (c.LogPlainKeys || n < logkey.MinSecret) {
		return c, &limiter.InputError{Field: "LogKeySecret", Reason: fmt.Sprintf("must be at least %d bytes, with hashed log keys; got %d bytes, plain keys %v", logkey.MinSecret, n, c.LogPlainKeys)}
	}
	if n := len(c.GossipKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return c, &limiter.InputError{Field: "GossipKey", Reason: fmt.Sprintf("must be 16, 24 or 32 bytes, got %d", n)}
	}
	for _, a := range []struct{ field, addr string }{{"GossipAddr", c.GossipAddr}, {"GRPCAddr", c.GRPCAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return c, &limiter.InputError{Field: a.field, Reason: fmt.Sprintf("%q is not host:port: %v", a.addr, err)}
		}
	}
	if c.HTTPAddr != "-" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return c, &limiter.InputError{Field: "HTTPAddr", Reason: fmt.Sprintf("%q is not host:port: %v", c.HTTPAddr, err)}
		}
	}
	if c.Envoy != nil {
		if err := c.Envoy.Validate(); err != nil {
			return c, fmt.Errorf("ringlimit: Envoy: %w", err)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Bounds = c.Bounds.WithDefaults()
	return c, nil
}

// defaultName is the host name and the gRPC port.
func defaultName(grpcAddr string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "ringlimit"
	}
	_, port, _ := net.SplitHostPort(grpcAddr)
	if p, err := strconv.Atoi(port); err == nil {
		return host + "-" + strconv.Itoa(p)
	}
	return host
}
