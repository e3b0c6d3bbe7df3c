package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
)

// testCA issues certificates for 127.0.0.1 into a test's temporary
// directory.
type testCA struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	File string // the CA certificate's PEM file
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ringlimit-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{t: t, dir: t.TempDir(), cert: cert, key: key}
	ca.File = ca.write("ca.crt", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(name, typ string, der []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return p
}

// security issues a certificate usable as server and client and returns
// the Security that names it.
func (ca *testCA) security(name string) client.Security {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return client.Security{
		CertFile: ca.write(name+".crt", "CERTIFICATE", der),
		KeyFile:  ca.write(name+".key", "EC PRIVATE KEY", kder),
		CAFile:   ca.File,
	}
}

// A client with a certificate from the fleet's CA (and the token) is
// served over mTLS; one without a certificate, or without the token, is
// not; HTTPTLS holds the certificate and the CA for the HTTP port.
func TestClientMTLS(t *testing.T) {
	ca := newTestCA(t)
	node := ca.security("node")
	node.AuthToken = "s3cret"
	tc := startCluster(t, 1, func(c *ringlimit.Config) { c.Security = node })
	sec := ca.security("client")
	sec.AuthToken = "s3cret"
	lim := limiter.Limit{Uses: 1, Window: time.Minute}
	ctx := context.Background()

	good := dialCluster(t, tc, func(cfg *client.Config) { cfg.Security = sec })
	if v, err := limiter.Consume(ctx, good, "k", lim); err != nil || !v.Allowed {
		t.Fatalf("with the certificate and the token: %+v %v; want allowed", v, err)
	}
	noToken := sec
	noToken.AuthToken = ""
	for name, s := range map[string]client.Security{"plaintext": {AuthToken: "s3cret"}, "no token": noToken} {
		c := dialCluster(t, tc, func(cfg *client.Config) { cfg.Security = s; cfg.Timeout = time.Second })
		if v, err := limiter.Consume(ctx, c, "other", lim); err == nil {
			t.Errorf("%s: %+v answered; want an error", name, v)
		}
	}

	cfg, err := client.HTTPTLS(sec)
	if err != nil || cfg == nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("HTTPTLS: %+v %v; want the client certificate and the CA", cfg, err)
	}
	if cfg, err := client.HTTPTLS(client.Security{AuthToken: "s3cret"}); cfg != nil || err != nil {
		t.Errorf("HTTPTLS without certificate files: %v %v; want nil, nil", cfg, err)
	}
	var ie *limiter.InputError
	missing := sec
	missing.CAFile += ".nope"
	if _, err := client.HTTPTLS(missing); !errors.As(err, &ie) || ie.Field != "Security.CAFile" {
		t.Errorf("HTTPTLS with a missing CA file: %v; want an InputError on Security.CAFile", err)
	}
	if _, err := client.Credentials(missing); !errors.As(err, &ie) || ie.Field != "Security.CAFile" {
		t.Errorf("Credentials with a missing CA file: %v; want an InputError on Security.CAFile", err)
	}
}
