package ringlimit

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/codec"
	"github.com/ringlimit/ringlimit/internal/transport"
	"github.com/ringlimit/ringlimit/rpc/api"
)

// Security configures TLS between peers and for clients, and the client
// API's bearer token: client.Security, so that one value configures a
// node (Config.Security) and a client of its fleet
// (ClientConfig.Security).
type Security = client.Security

// ClientTLS returns the TLS configuration of a client of the nodes' HTTP
// port (HTTPS when the fleet has TLS): client.HTTPTLS.
func ClientTLS(sec Security) (*tls.Config, error) { return client.HTTPTLS(sec) }

// ClientCredentials returns gRPC dial options for a client of a fleet
// (mTLS, the bearer token, the nodes' HTTP/2 windows): client.Credentials.
func ClientCredentials(sec Security) ([]grpc.DialOption, error) { return client.Credentials(sec) }

// tlsConfigs loads the node's certificate and the CA, for its server
// (client certificates required) and for its calls to peers.
func tlsConfigs(s Security) (server, cli *tls.Config, err error) {
	return transport.TLSConfigs(s.CertFile, s.KeyFile, s.CAFile)
}

func serverCreds(s Security) ([]grpc.ServerOption, error) {
	if !s.TLSEnabled() {
		return nil, nil
	}
	srv, _, err := tlsConfigs(s)
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(srv))}, nil
}

// The fixed HTTP/2 windows (see transport.StreamWindow), on the node's
// server and on its calls to peers.
var (
	windowDialOptions   = transport.WindowDialOptions()
	windowServerOptions = transport.WindowServerOptions()
)

// peerConnect reconnects to a restarted peer quickly: gRPC's default
// first reconnect waits a second, during which every forward to a node that
// came back after a rolling restart would fail to the fallback policy.
var peerConnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: 2 * time.Second,
}

// dialer returns how the node connects to its peers, presenting peer's
// credential on every call.
func dialer(s Security, peer peerAuth) (func(addr string) (*grpc.ClientConn, error), error) {
	creds := insecure.NewCredentials()
	if s.TLSEnabled() {
		_, cli, err := tlsConfigs(s)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cli)
	}
	return func(addr string) (*grpc.ClientConn, error) {
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithConnectParams(peerConnect), codec.DialOption()}, windowDialOptions...)
		return grpc.NewClient(addr, append(opts, peer.dialOptions()...)...)
	}, nil
}

// authorize requires the bearer token on the client API. The peer
// service is exempt: peers authenticate with the peer token (peerAuth).
func authorize(ctx context.Context, s Security, method string) error {
	if s.AuthToken == "" || strings.HasPrefix(method, peerMethodPrefix) || strings.HasPrefix(method, "/grpc.health.") {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tokenOK(v, s.AuthToken) {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "ringlimit: missing or wrong bearer token")
}

func tokenOK(header, token string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// httpTLSConfig returns the HTTP port's TLS configuration, nil without TLS. The
// port serves HTTPS with the node's certificate and verifies a client
// certificate when one is given, without requiring one: probes and metric
// scrapers rarely hold one. The JSON API requires one (httpAuth), as the
// gRPC port does.
func httpTLSConfig(s Security) (*tls.Config, error) {
	if !s.TLSEnabled() {
		return nil, nil
	}
	srv, _, err := tlsConfigs(s)
	if err != nil {
		return nil, err
	}
	srv = srv.Clone()
	srv.ClientAuth = tls.VerifyClientCertIfGiven
	srv.NextProtos = []string{"h2", "http/1.1"}
	return srv, nil
}

// httpAuth guards the JSON API (/v1/...) as the gRPC client API is
// guarded: with TLS on, a verified client certificate; with a token, the
// bearer token. Health and metrics stay open for probes and scrapers.
func httpAuth(s Security, next http.Handler) http.Handler {
	if s.AuthToken == "" && !s.TLSEnabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			if s.TLSEnabled() && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
				api.WriteStatusProblem(w, r, http.StatusUnauthorized, "a client certificate signed by the fleet's CA is required")
				return
			}
			if s.AuthToken != "" && !tokenOK(r.Header.Get("Authorization"), s.AuthToken) {
				api.WriteStatusProblem(w, r, http.StatusUnauthorized, "missing or wrong bearer token")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
