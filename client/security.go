package client

import (
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/internal/transport"
)

// Security configures TLS between peers and for clients, and the client
// API's bearer token. Nodes (ringlimit.Config.Security, where it is
// ringlimit.Security) and clients (Config.Security) use the same type.
type Security struct {
	// CertFile and KeyFile are this node's (or client's) certificate;
	// CAFile the CA
	// every peer's and client's certificate must chain to (mTLS). With
	// them the HTTP port serves HTTPS too: its JSON API requires a client
	// certificate, while health and metrics take requests without one.
	CertFile, KeyFile, CAFile string
	// AuthToken, when set, is required as "authorization: Bearer <token>"
	// on the client API (gRPC, the HTTP JSON API and Envoy's RLS). The
	// peer API is exempt: ringlimit.Config.PeerToken guards it.
	AuthToken string
}

// TLSEnabled reports whether any certificate file is set (then all three
// are required).
func (s Security) TLSEnabled() bool { return transport.TLSEnabled(s.CertFile, s.KeyFile, s.CAFile) }

// HTTPTLS returns the TLS configuration of a client of the nodes' HTTP
// port (HTTPS when the fleet has TLS): the CA to trust and the client
// certificate the JSON API requires. It is nil, with no error, when sec
// has no certificate files.
func HTTPTLS(sec Security) (*tls.Config, error) {
	if !sec.TLSEnabled() {
		return nil, nil
	}
	_, cli, err := transport.TLSConfigs(sec.CertFile, sec.KeyFile, sec.CAFile)
	return cli, err
}

// Credentials returns gRPC dial options for a client of a fleet: mTLS
// from the certificate files (plaintext without them), the bearer token,
// and the fixed HTTP/2 windows the nodes use (no BDP pings).
func Credentials(sec Security) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if sec.TLSEnabled() {
		_, cli, err := transport.TLSConfigs(sec.CertFile, sec.KeyFile, sec.CAFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cli)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if sec.AuthToken != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(transport.Bearer{Token: sec.AuthToken, Secure: sec.TLSEnabled()}))
	}
	return append(opts, transport.WindowDialOptions()...), nil
}
