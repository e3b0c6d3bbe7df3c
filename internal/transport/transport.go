package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/limiter"
)

// TLSEnabled reports whether any certificate file is configured.
func TLSEnabled(certFile, keyFile, caFile string) bool {
	return certFile != "" || keyFile != "" || caFile != ""
}

// TLSConfigs loads a certificate and the CA, for a server that requires
// client certificates (mTLS) and for a client that presents its own and
// checks the server's. Its errors are *limiter.InputError naming the
// Security field (Security, Security.CertFile, Security.CAFile).
func TLSConfigs(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, nil, &limiter.InputError{Field: "Security", Reason: "TLS needs all of CertFile, KeyFile and CAFile (--tls-cert, --tls-key, --tls-ca)"}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, &limiter.InputError{Field: "Security.CertFile", Reason: err.Error()}
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, &limiter.InputError{Field: "Security.CAFile", Reason: err.Error()}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, &limiter.InputError{Field: "Security.CAFile", Reason: "no PEM certificate in " + caFile}
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return server, client, nil
}

// HTTP/2 flow-control windows. A window set explicitly turns off gRPC's
// dynamic window sizing (BDP estimation), which sends a PING after data
// whenever none is outstanding: with small batches back to back, about
// one PING and its ACK per batch, each a write and a wake-up on both
// sides. The messages here are small; fixed windows of 1 MiB per stream
// and 4 MiB per connection never throttle them.
const (
	StreamWindow = 1 << 20
	ConnWindow   = 4 << 20
)

// WindowDialOptions returns the dial options that set the fixed windows.
func WindowDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(StreamWindow), grpc.WithInitialConnWindowSize(ConnWindow)}
}

// WindowServerOptions returns the server options that set the fixed
// windows.
func WindowServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(StreamWindow), grpc.InitialConnWindowSize(ConnWindow)}
}

// Bearer sends Token as "authorization: Bearer <token>" on every call.
// Secure (set when the caller has TLS) makes gRPC refuse to send it on a
// connection without TLS.
type Bearer struct {
	Token  string
	Secure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.Token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (b Bearer) RequireTransportSecurity() bool { return b.Secure }
