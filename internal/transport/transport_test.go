package transport_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ringlimit/ringlimit/internal/transport"
	"github.com/ringlimit/ringlimit/limiter"
)

// Incomplete or unreadable certificate files are errors naming the
// Security field (the TLS round trips are tested where nodes and clients
// use them: package client, and the root's ops_tls_test.go).
func TestTLSConfigsErrors(t *testing.T) {
	for _, tt := range []struct {
		name          string
		cert, key, ca string
		enabled       bool
		field         string
	}{
		{"none", "", "", "", false, "Security"},
		{"CA only", "", "", "ca.crt", true, "Security"},
		{"no key", "n.crt", "", "ca.crt", true, "Security"},
		{"missing files", "/nonexistent/n.crt", "/nonexistent/n.key", "/nonexistent/ca.crt", true, "Security.CertFile"},
	} {
		if got := transport.TLSEnabled(tt.cert, tt.key, tt.ca); got != tt.enabled {
			t.Errorf("%s: TLSEnabled = %v, want %v", tt.name, got, tt.enabled)
		}
		var ie *limiter.InputError
		srv, cli, err := transport.TLSConfigs(tt.cert, tt.key, tt.ca)
		if srv != nil || cli != nil || !errors.As(err, &ie) || ie.Field != tt.field {
			t.Errorf("%s: TLSConfigs = %v, %v, %v; want an InputError on %s", tt.name, srv, cli, err, tt.field)
		}
	}
}

// The bearer token goes as "authorization: Bearer <token>", and only
// over TLS when the caller has TLS.
func TestBearer(t *testing.T) {
	md, err := transport.Bearer{Token: "s3cret"}.GetRequestMetadata(context.Background())
	if err != nil || len(md) != 1 || md["authorization"] != "Bearer s3cret" {
		t.Fatalf("metadata %v, %v; want authorization: Bearer s3cret", md, err)
	}
	if (transport.Bearer{Token: "t"}).RequireTransportSecurity() || !(transport.Bearer{Token: "t", Secure: true}).RequireTransportSecurity() {
		t.Fatal("RequireTransportSecurity does not follow Secure")
	}
}
