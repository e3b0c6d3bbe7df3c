package ringlimit

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/limiter"
)

// tlsEnabled reports whether certificates are configured.
func (s Security) tlsEnabled() bool { return s.CertFile != "" || s.KeyFile != "" || s.CAFile != "" }

// tlsConfigs loads the node's certificate and the CA, for a server that
// requires client certificates (mTLS) and for a client that presents its
// own and checks the server's.
func (s Security) tlsConfigs() (server, client *tls.Config, err error) {
	if s.CertFile == "" || s.KeyFile == "" || s.CAFile == "" {
		return nil, nil, &limiter.InputError{Field: "Security", Reason: "TLS needs all of CertFile, KeyFile and CAFile (--tls-cert, --tls-key, --tls-ca)"}
	}
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return nil, nil, &limiter.InputError{Field: "Security.CertFile", Reason: err.Error()}
	}
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, nil, &limiter.InputError{Field: "Security.CAFile", Reason: err.Error()}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, &limiter.InputError{Field: "Security.CAFile", Reason: "no PEM certificate in " + s.CAFile}
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return server, client, nil
}

func (s Security) serverCreds() ([]grpc.ServerOption, error) {
	if !s.tlsEnabled() {
		return nil, nil
	}
	srv, _, err := s.tlsConfigs()
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(srv))}, nil
}

// HTTP/2 flow-control windows. A window set explicitly turns off gRPC's
// dynamic window sizing (BDP estimation), which sends a PING after data
// whenever none is outstanding: with small batches back to back, about
// one PING and its ACK per batch, each a write and a wake-up on both
// sides. The messages here are small; fixed windows of 1 MiB per stream
// and 4 MiB per connection never throttle them.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

var windowDialOptions = []grpc.DialOption{grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow)}

var windowServerOptions = []grpc.ServerOption{grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow)}

// peerConnect reconnects to a restarted peer quickly: gRPC's default
// first reconnect waits a second, during which every forward to a node that
// came back after a rolling restart would fail to the fallback policy.
var peerConnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: 2 * time.Second,
}

// dialer returns how the node connects to its peers, presenting peer's
// credential on every call.
func (s Security) dialer(peer peerAuth) (func(addr string) (*grpc.ClientConn, error), error) {
	creds := insecure.NewCredentials()
	if s.tlsEnabled() {
		_, cli, err := s.tlsConfigs()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cli)
	}
	return func(addr string) (*grpc.ClientConn, error) {
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithConnectParams(peerConnect)}, windowDialOptions...)
		return grpc.NewClient(addr, append(opts, peer.dialOptions()...)...)
	}, nil
}

// authorize requires the bearer token on the client API. The peer
// service is exempt: peers authenticate with the peer token (peerAuth).
func (s Security) authorize(ctx context.Context, method string) error {
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

// httpTLS returns the HTTP port's TLS configuration, nil without TLS. The
// port serves HTTPS with the node's certificate and verifies a client
// certificate when one is given, without requiring one: probes and metric
// scrapers rarely hold one. The JSON API requires one (httpAuth), as the
// gRPC port does.
func (s Security) httpTLS() (*tls.Config, error) {
	if !s.tlsEnabled() {
		return nil, nil
	}
	srv, _, err := s.tlsConfigs()
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
func (s Security) httpAuth(next http.Handler) http.Handler {
	if s.AuthToken == "" && !s.tlsEnabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			if s.tlsEnabled() && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
				writeStatusProblem(w, r, http.StatusUnauthorized, "a client certificate signed by the fleet's CA is required")
				return
			}
			if s.AuthToken != "" && !tokenOK(r.Header.Get("Authorization"), s.AuthToken) {
				writeStatusProblem(w, r, http.StatusUnauthorized, "missing or wrong bearer token")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// ClientTLS returns the TLS configuration of a client of the nodes' HTTP
// port (HTTPS when the fleet has TLS): the CA to trust and the client
// certificate the JSON API requires. It is nil, with no error, when sec
// has no certificate files.
func ClientTLS(sec Security) (*tls.Config, error) {
	if !sec.tlsEnabled() {
		return nil, nil
	}
	_, cli, err := sec.tlsConfigs()
	return cli, err
}

// ClientCredentials returns gRPC dial options for a client of a fleet:
// mTLS from the certificate files (plaintext without them), the bearer
// token, and the fixed HTTP/2 windows the nodes use (no BDP pings).
func ClientCredentials(sec Security) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if sec.tlsEnabled() {
		_, cli, err := sec.tlsConfigs()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cli)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if sec.AuthToken != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{sec.AuthToken, sec.tlsEnabled()}))
	}
	return append(opts, windowDialOptions...), nil
}

type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }
