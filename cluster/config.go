package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/ring"
)

// Defaults used for zero Config fields.
const (
	DefaultGossipAddr     = "127.0.0.1:7946"
	DefaultProfile        = ProfileLAN
	DefaultRejoinInterval = 10 * time.Second
)

// Profiles name memberlist timing presets.
const (
	// ProfileLAN is memberlist's LAN preset (probe every 1 s, a crashed node
	// is declared dead after roughly 5-7 s).
	ProfileLAN = "lan"
	// ProfileLocal is tuned for one host or a fast, quiet network: probe
	// every 200 ms with a 100 ms timeout, gossip every 50 ms; a crashed node
	// is declared dead after about a second.
	ProfileLocal = "local"
)

// Config configures one node. The zero value of every field except Name is
// valid. Start never writes into the caller's Config.
type Config struct {
	// Name identifies the node in the cluster and on the ring; required and
	// unique. Nodes are told apart by name, not address, so several nodes
	// may share an IP with different ports.
	Name string

	// GossipAddr is the host:port to bind for gossip (UDP and TCP). Default
	// "127.0.0.1:7946". Port 0 picks a free port (for tests); Local reports
	// the one chosen.
	GossipAddr string

	// AdvertiseAddr is the host:port other nodes use to reach this one, when
	// it differs from GossipAddr (NAT, binding 0.0.0.0). Default: the bound
	// address (memberlist picks a private IP when binding 0.0.0.0).
	AdvertiseAddr string

	// GRPCAddr is this node's gRPC address, carried to the other nodes in
	// the gossip metadata with Version. Optional.
	GRPCAddr string

	// Version is the software version carried in the metadata. Default: the
	// ringlimit module version from the build info, or "dev".
	Version string

	// Join lists host:port addresses of nodes to join. A DNS name stands for
	// every address it resolves to and is resolved again at each (re-)join,
	// so a Kubernetes headless service works. Empty: start a one-node
	// cluster.
	Join []string

	// Profile is the timing preset: "lan" (default) or "local".
	Profile string

	// SecretKey enables gossip encryption (AES-GCM) when set; 16, 24 or 32
	// bytes. Every node must use the same key: a node with another key, or
	// none, cannot join. Default: no encryption.
	SecretKey []byte

	// RejoinInterval is how often the node joins the Join list again.
	// memberlist does not merge the two sides of a healed partition by
	// itself, so each node periodically joins its seeds again (one
	// push/pull state exchange with each). Default 10 s; negative disables
	// re-joining.
	RejoinInterval time.Duration

	// Ring configures the consistent-hash ring built from the members; it
	// must be the same on every node.
	Ring ring.Config

	// Logger receives this package's logs and, at debug level, memberlist's
	// own. Default: discard.
	Logger *slog.Logger

	// wrapTransport, when set (tests only), wraps the gossip transport so
	// tests can inject network faults.
	wrapTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport
}

// ErrInvalidConfig is matched (errors.Is) by every *ConfigError.
var ErrInvalidConfig = errors.New("cluster: invalid config")

// ConfigError reports a Config field Start cannot use.
type ConfigError struct {
	Field  string // e.g. "SecretKey" or "Ring.Load"
	Reason string
	Err    error // the underlying error, if any
}

func (e *ConfigError) Error() string {
	s := fmt.Sprintf("cluster: invalid Config.%s: %s", e.Field, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

func (e *ConfigError) Unwrap() error { return e.Err }

// maxMetaBytes leaves room in memberlist's 512-byte metadata for the encoding.
const maxMetaBytes = memberlist.MetaMaxSize - 64

// Validate reports the first field Start would reject, as a *ConfigError.
func (c Config) Validate() error {
	if c.Name == "" {
		return &ConfigError{Field: "Name", Reason: "required"}
	}
	if _, _, err := splitHostPort(c.gossipAddr()); err != nil {
		return &ConfigError{Field: "GossipAddr", Reason: "want host:port", Err: err}
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return &ConfigError{Field: "AdvertiseAddr", Reason: "want host:port", Err: err}
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			return &ConfigError{Field: "Join", Reason: fmt.Sprintf("%q: want host:port", j), Err: err}
		}
	}
	switch c.Profile {
	case "", ProfileLAN, ProfileLocal:
	default:
		return &ConfigError{Field: "Profile", Reason: fmt.Sprintf("%q: want %q or %q", c.Profile, ProfileLAN, ProfileLocal)}
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return &ConfigError{Field: "SecretKey", Reason: fmt.Sprintf("%d bytes: want 16, 24 or 32", len(c.SecretKey))}
	}
	if len(c.GRPCAddr)+len(c.Version) > maxMetaBytes {
		return &ConfigError{Field: "GRPCAddr", Reason: fmt.Sprintf("GRPCAddr and Version take more than %d bytes of metadata", maxMetaBytes)}
	}
	if err := c.Ring.Validate(); err != nil {
		var ce *ring.ConfigError
		if errors.As(err, &ce) {
			return &ConfigError{Field: "Ring." + ce.Field, Reason: ce.Reason, Err: err}
		}
		return &ConfigError{Field: "Ring", Reason: "invalid", Err: err}
	}
	return nil
}

func (c Config) gossipAddr() string {
	if c.GossipAddr == "" {
		return DefaultGossipAddr
	}
	return c.GossipAddr
}

func splitHostPort(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, int(port), nil
}

// memberlistConfig translates c (already validated) into memberlist's.
func (c Config) memberlistConfig() *memberlist.Config {
	var mc *memberlist.Config
	if c.Profile == ProfileLocal {
		mc = memberlist.DefaultLocalConfig()
		mc.ProbeInterval = 200 * time.Millisecond
		mc.ProbeTimeout = 100 * time.Millisecond
		mc.GossipInterval = 50 * time.Millisecond
		// Suspicion lasts SuspicionMult probe intervals once other nodes
		// confirm it (600 ms), at most SuspicionMaxTimeoutMult times that
		// without confirmations: about 1 s from crash to dead in practice.
		mc.SuspicionMult = 3
		mc.SuspicionMaxTimeoutMult = 2
	} else {
		mc = memberlist.DefaultLANConfig()
	}
	// Each state change is gossiped RetransmitMult × log10(n+1) times: with
	// the stock 4 and a handful of nodes a leave announcement sometimes
	// missed a node for seconds (until the next push/pull), which kept
	// forwarding to the leaving node. Gossip messages are tiny; send more.
	mc.RetransmitMult = 6
	mc.Name = c.Name
	host, port, _ := splitHostPort(c.gossipAddr())
	mc.BindAddr = host
	mc.BindPort = port
	mc.AdvertisePort = port
	if c.AdvertiseAddr != "" {
		ah, ap, _ := splitHostPort(c.AdvertiseAddr)
		mc.AdvertiseAddr = ah
		mc.AdvertisePort = ap
	}
	if len(c.SecretKey) > 0 {
		mc.SecretKey = append([]byte(nil), c.SecretKey...)
	}
	return mc
}
