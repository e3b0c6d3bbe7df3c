package ringlimit

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/limiter"
)

// peerTokenHeader is the gRPC metadata key a node sends its cluster's peer
// token in, on every call of the peer API (ringlimit.v1.Peer).
const peerTokenHeader = "ringlimit-peer-token"

// peerMethodPrefix is the full-method prefix of the peer API.
const peerMethodPrefix = "/ringlimit.v1.Peer/"

// MinPeerTokenLen is the shortest Config.PeerToken accepted: the token is
// all that tells a peer from a client, so it must not be guessable.
const MinPeerTokenLen = 16

// peerAuth guards the peer API with the cluster's peer token. A client's
// certificate or bearer token proves nothing here: a client of the fleet
// holds those, and with the peer API it could read any key's log, give
// back uses it never made, or hand a node fabricated state. The zero value
// (no token) leaves the peer API open, as it was before tokens existed.
type peerAuth struct{ token string }

// validatePeerToken checks Config.PeerToken: empty (no peer credential), or
// at least MinPeerTokenLen visible ASCII characters, the characters a gRPC
// metadata value carries unchanged.
func validatePeerToken(t string) error {
	if t == "" {
		return nil
	}
	if len(t) < MinPeerTokenLen {
		return &limiter.InputError{Field: "PeerToken", Reason: fmt.Sprintf("must be at least %d characters, got %d (make one with: openssl rand -hex 32)", MinPeerTokenLen, len(t))}
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c < 0x21 || c > 0x7e {
			return &limiter.InputError{Field: "PeerToken", Reason: fmt.Sprintf("byte %d is %#x: only visible ASCII characters (no spaces) are allowed", i, c)}
		}
	}
	return nil
}

// check refuses a peer-API call without the right token: Unauthenticated
// when none was presented, PermissionDenied when another one was.
func (p peerAuth) check(ctx context.Context, method string) error {
	if p.token == "" || !strings.HasPrefix(method, peerMethodPrefix) {
		return nil
	}
	got := metadata.ValueFromIncomingContext(ctx, peerTokenHeader)
	if len(got) == 0 {
		return status.Error(codes.Unauthenticated, "ringlimit: the peer API is for the cluster's nodes: no peer token (ringlimit-peer-token) was presented")
	}
	for _, v := range got {
		if subtle.ConstantTimeCompare([]byte(v), []byte(p.token)) == 1 {
			return nil
		}
	}
	return status.Error(codes.PermissionDenied, "ringlimit: the peer API is for the cluster's nodes: wrong peer token")
}

// guard is a check of a call's credentials for its full method name.
type guard func(ctx context.Context, method string) error

// interceptors run g before every unary and stream handler: its error is
// the call's answer.
func (g guard) interceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := g(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := g(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}

// nodeGuard checks a call to a node: the peer token on the peer API, the
// client's bearer token on the client API.
func nodeGuard(peers peerAuth, sec Security) guard {
	return func(ctx context.Context, method string) error {
		if err := peers.check(ctx, method); err != nil {
			return err
		}
		return authorize(ctx, sec, method)
	}
}

// dialOptions are what a node adds to its connections to peers: the token
// on every call. Without TLS it travels in clear, like the client token:
// a token-only cluster trusts its network not to be read.
func (p peerAuth) dialOptions() []grpc.DialOption {
	if p.token == "" {
		return nil
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(peerCredential(p.token))}
}

type peerCredential string

func (c peerCredential) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{peerTokenHeader: string(c)}, nil
}

// RequireTransportSecurity is false so that a cluster without TLS can
// still keep clients out of the peer API.
func (c peerCredential) RequireTransportSecurity() bool { return false }

// openPeerWarning is logged at start by a node whose peer API anyone who
// reaches its gRPC port may call: no peer token, and a port bound beyond
// loopback. Empty when there is nothing to warn of.
func openPeerWarning(token string, bound net.Addr) string {
	if token != "" {
		return ""
	}
	if ta, ok := bound.(*net.TCPAddr); ok && ta.IP.IsLoopback() {
		return ""
	}
	return fmt.Sprintf("ringlimit: the peer API on %s has no peer credential: anyone who reaches this port can read and rewrite counts; set --peer-token-file (Config.PeerToken) on every node", bound)
}
