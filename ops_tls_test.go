package ringlimit_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/limiter"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// testCA is a certificate authority made with crypto/x509, writing PEM
// files into a test's temporary directory.
type testCA struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	File string // the CA certificate's PEM file
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{t: t, dir: t.TempDir(), cert: cert, key: key}
	ca.File = ca.write(name+"-ca.crt", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(name, typ string, der []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return p
}

// issue makes a certificate for 127.0.0.1 and localhost usable as server
// and client, and returns its certificate and key files.
func (ca *testCA) issue(name string) (certFile, keyFile string) {
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
	return ca.write(name+".crt", "CERTIFICATE", der), ca.write(name+".key", "EC PRIVATE KEY", kder)
}

// tlsDial dials addr with a TLS config (nil: plaintext).
func tlsDial(t *testing.T, addr string, cfg *tls.Config) pb.LimiterClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	return pb.NewLimiterClient(dialPlain(t, addr, grpc.WithTransportCredentials(creds)))
}

// checkMTLS runs the checks every mTLS cluster must pass: a client with a
// certificate from the CA is served (through a node that forwards to the
// owner over mTLS); a client without a certificate, with one from another
// CA, or in plaintext, is refused.
func checkMTLS(t *testing.T, tc *testCluster, client ringlimit.Security) {
	t.Helper()
	n0, n1 := tc.nodes[0], tc.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts, err := ringlimit.ClientCredentials(client)
	if err != nil {
		t.Fatal(err)
	}
	good := pb.NewLimiterClient(dialPlain(t, n0.GRPCAddr(), opts...))
	waitRingsAgree(t, tc)
	remote := keyOwnedBy(t, n0, n1.Name(), "tls")
	for i := range 3 {
		r, err := good.Consume(ctx, consumeReq(remote, 2, limiter.SlidingLog))
		if err != nil {
			t.Fatalf("call %d with a CA certificate: %v", i+1, err)
		}
		if r.GetVerdict().GetAllowed() != (i < 2) {
			t.Fatalf("call %d: allowed %v, want %v (counted at the owner over mTLS)", i+1, r.GetVerdict().GetAllowed(), i < 2)
		}
	}
	if served := n1.Router().Stats().Served.Load(); served == 0 {
		t.Fatal("the owner served no forwarded call: peers did not talk over mTLS")
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(client.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	other := newTestCA(t, "other")
	oc, ok := other.issue("intruder")
	otherCert, err := tls.LoadX509KeyPair(oc, ok)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"no client certificate", &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		{"a certificate from another CA", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{otherCert}, MinVersion: tls.VersionTLS12}},
		{"plaintext", nil},
	} {
		_, err := tlsDial(t, n0.GRPCAddr(), c.cfg).Consume(ctx, consumeReq("refused", 5, limiter.SlidingLog))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("client with %s: %v, want refused (Unavailable)", c.name, err)
		}
	}
	checkHTTPS(t, n0, client, pool, otherCert)
}

// checkHTTPS checks the HTTP port of a node with TLS: HTTPS with the
// node's certificate; the JSON API needs a client certificate from the CA
// (and the token, when the client has one); health takes requests without
// a certificate; the API refuses a certificate from another CA, and the
// port refuses plaintext.
func checkHTTPS(t *testing.T, n *ringlimit.Node, client ringlimit.Security, pool *x509.CertPool, otherCert tls.Certificate) {
	t.Helper()
	mine, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	httpClient := func(certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	do := func(c *http.Client, method, url, body string) (int, string, error) {
		return httpDo(c, method, url, client.AuthToken, body)
	}
	base := "https://" + n.HTTPAddr()
	consume := `{"entries":[{"key":"https-key","limit":"5/1m"}]}`
	if code, body, err := do(httpClient(mine), "POST", base+"/v1/consume", consume); err != nil || code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("HTTPS JSON API with a CA certificate: %d %s %v; want 200, allowed", code, body, err)
	}
	anon := httpClient()
	if code, body, err := do(anon, "GET", base+"/readyz", ""); err != nil || code != http.StatusOK {
		t.Errorf("HTTPS /readyz without a client certificate: %d %s %v; want 200", code, body, err)
	}
	if code, body, err := do(anon, "POST", base+"/v1/consume", consume); err != nil || code != http.StatusUnauthorized {
		t.Errorf("HTTPS JSON API without a client certificate: %d %s %v; want 401", code, body, err)
	}
	// A Go client offers no certificate the server's CA list does not
	// name, so this one arrives anonymous; either way it is not served.
	if code, body, err := do(httpClient(otherCert), "POST", base+"/v1/consume", consume); err == nil && code != http.StatusUnauthorized {
		t.Errorf("HTTPS JSON API with a certificate from another CA: %d %s; want 401 or a refused handshake", code, body)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if code, body, err := do(plain, "POST", "http://"+n.HTTPAddr()+"/v1/consume", consume); err == nil && code != http.StatusBadRequest {
		t.Errorf("plaintext HTTP to the TLS port: %d %s; want it refused (400 or a failed request)", code, body)
	}
}

func TestMTLSCluster(t *testing.T) {
	ca := newTestCA(t, "ringlimit")
	var sec []ringlimit.Security
	for _, name := range []string{"node-0", "node-1"} {
		c, k := ca.issue(name)
		sec = append(sec, ringlimit.Security{CertFile: c, KeyFile: k, CAFile: ca.File})
	}
	i := 0
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.Security = sec[i]; i++ })
	cc, ck := ca.issue("client")
	checkMTLS(t, tc, ringlimit.Security{CertFile: cc, KeyFile: ck, CAFile: ca.File})
}

// TLS settings that cannot work are errors naming the field.
func TestTLSConfigErrors(t *testing.T) {
	ca := newTestCA(t, "ringlimit")
	c, k := ca.issue("node")
	for _, s := range []struct {
		name  string
		sec   ringlimit.Security
		field string
	}{
		{"no CA", ringlimit.Security{CertFile: c, KeyFile: k}, "Security"},
		{"missing cert file", ringlimit.Security{CertFile: c + ".nope", KeyFile: k, CAFile: ca.File}, "Security.CertFile"},
		{"CA file without PEM", ringlimit.Security{CertFile: c, KeyFile: k, CAFile: k + ".nope"}, "Security.CAFile"},
	} {
		cfg := nodeConfig("bad-tls")
		cfg.Security = s.sec
		n, err := ringlimit.Start(context.Background(), cfg)
		var ie *limiter.InputError
		if err == nil || !errors.As(err, &ie) || ie.Field != s.field {
			if n != nil {
				n.Close(context.Background())
			}
			t.Errorf("%s: %v, want an InputError on %s", s.name, err, s.field)
		}
	}
}

// A node with the wrong gossip key, or none, cannot join; a key of a bad
// length is an error naming GossipKey.
func TestGossipKey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.GossipKey = key })
	for _, c := range []struct {
		name string
		key  []byte
	}{
		{"wrong key", bytes.Repeat([]byte{8}, 32)},
		{"no key", nil},
	} {
		cfg := nodeConfig("intruder")
		cfg.GossipKey = c.key
		cfg.Join = []string{tc.nodes[0].GossipAddr()}
		cfg.JoinTimeout = time.Second
		n, err := ringlimit.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = n.WaitReady(ctx)
		cancel()
		n.Close(context.Background())
		if err == nil {
			t.Errorf("%s: the node joined a cluster whose gossip key it does not have", c.name)
		}
		for _, m := range tc.nodes {
			if got := len(m.Members()); got != 2 {
				t.Errorf("%s: %s sees %d members, want 2", c.name, m.Name(), got)
			}
		}
	}
	cfg := nodeConfig("short-key")
	cfg.GossipKey = []byte("too short")
	var ie *limiter.InputError
	if n, err := ringlimit.Start(context.Background(), cfg); !errors.As(err, &ie) || ie.Field != "GossipKey" {
		if n != nil {
			n.Close(context.Background())
		}
		t.Errorf("a 9-byte gossip key: %v, want an InputError on GossipKey", err)
	}
}

// The TLS setup of the README (Operating ringlimit), run as written: its openssl commands
// make the files, and two nodes started with them form an mTLS cluster
// with gossip encryption and a bearer token.
func TestOperatingDocTLSCommands(t *testing.T) {
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- tls-commands: run by TestOperatingDocTLSCommands -->\n```sh\n")
	script, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("README.md: no sh block after the tls-commands marker")
	}
	if strings.Count(strings.TrimSpace(script), "\n") != 5 {
		t.Fatalf("README.md: the TLS setup is not six commands:\n%s", script)
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is not installed: apt-get install -y openssl")
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "-e", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the doc's commands failed: %v\n%s", err, out)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	gossip, token, peerToken := read("gossip.key"), strings.TrimSpace(string(read("token"))), strings.TrimSpace(string(read("peer-token")))
	node := ringlimit.Security{CertFile: filepath.Join(dir, "node.crt"), KeyFile: filepath.Join(dir, "node.key"), CAFile: filepath.Join(dir, "ca.crt"), AuthToken: token}
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.Security = node; c.GossipKey = gossip; c.PeerToken = peerToken })
	client := ringlimit.Security{CertFile: filepath.Join(dir, "client.crt"), KeyFile: filepath.Join(dir, "client.key"), CAFile: filepath.Join(dir, "ca.crt"), AuthToken: token}
	checkMTLS(t, tc, client)
	// The same certificate without the token is authenticated by TLS but
	// not allowed the client API.
	client.AuthToken = ""
	opts, err := ringlimit.ClientCredentials(client)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pb.NewLimiterClient(dialPlain(t, tc.nodes[0].GRPCAddr(), opts...)).Consume(context.Background(), consumeReq("k", 5, limiter.SlidingLog))
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("client certificate without the token: %v, want Unauthenticated", err)
	}
	// Nor does the client's certificate, with the token or without, open
	// the peer API.
	for _, tok := range []string{"", token} {
		client.AuthToken = tok
		opts, err := ringlimit.ClientCredentials(client)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		wantRefused(t, "the doc's client certificate", peerCalls(ctx, pb.NewPeerClient(dialPlain(t, tc.nodes[0].GRPCAddr(), opts...)), "doc-attack"))
		cancel()
	}
}
