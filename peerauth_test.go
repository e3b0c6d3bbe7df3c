package ringlimit_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

const (
	testPeerToken   = "peer-secret-0123456789abcdef"
	testClientToken = "client-token-0123456789"
)

// peerCalls calls every method of the peer API once, as an attacker would:
// give back uses, read a log, hand over a fabricated state, count calls.
// Each returns the call's error.
func peerCalls(ctx context.Context, c pb.PeerClient, key string) map[string]error {
	entries := rpc.EntriesToPB([]limiter.Entry{{Key: key, Limit: limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 5, Window: time.Minute}}})
	errs := map[string]error{}
	_, errs["Forward"] = c.Forward(ctx, &pb.ForwardRequest{From: "intruder", Calls: []*pb.Call{{Entries: entries}}})
	_, errs["Release"] = c.Release(ctx, &pb.ReleaseRequest{})
	_, errs["HandOff"] = c.HandOff(ctx, &pb.StateRequest{From: "intruder"})
	_, errs["Replicate"] = c.Replicate(ctx, &pb.StateRequest{From: "intruder"})
	_, errs["Fetch"] = c.Fetch(ctx, &pb.FetchRequest{Counters: []*pb.FetchRequest_Counter{{Key: []byte(key), Algorithm: pb.Algorithm_SLIDING_LOG, WindowMs: 60000}}})
	_, errs["Invalidate"] = c.Invalidate(ctx, &pb.InvalidateRequest{Keys: [][]byte{[]byte(key)}})
	return errs
}

// wantRefused checks that every peer method was refused as a non-peer's
// call: Unauthenticated or PermissionDenied, never served.
func wantRefused(t *testing.T, who string, errs map[string]error) {
	t.Helper()
	for m, err := range errs {
		if c := status.Code(err); c != codes.Unauthenticated && c != codes.PermissionDenied {
			t.Errorf("%s: Peer/%s = %v, want Unauthenticated or PermissionDenied", who, m, err)
		}
	}
}

// withMD adds outgoing metadata (a token) to every call.
func withMD(kv ...string) grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, kv...), method, req, reply, cc, opts...)
	})
}

// checkPeersServed checks that the peer API works between the nodes: a
// call through n0 for a key n1 owns is counted at n1 (Forward), and when
// n1 leaves, its count reaches its new owner (HandOff), so the key stays
// at its limit. tc has three nodes, so that the two left keep a majority.
func checkPeersServed(t *testing.T, tc *testCluster, client pb.LimiterClient) {
	t.Helper()
	n0, n1 := tc.nodes[0], tc.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitRingsAgree(t, tc)
	remote := keyOwnedBy(t, n0, n1.Name(), "peer")
	for i := range 3 {
		r, err := client.Consume(ctx, consumeReq(remote, 2, limiter.SlidingLog))
		if err != nil {
			t.Fatalf("call %d through %s: %v", i+1, n0.Name(), err)
		}
		if r.GetVerdict().GetAllowed() != (i < 2) {
			t.Fatalf("call %d: allowed %v, want %v", i+1, r.GetVerdict().GetAllowed(), i < 2)
		}
	}
	if n1.Router().Stats().Served.Load() == 0 {
		t.Fatal("the owner served no forwarded call: the peers' Forward was refused")
	}
	tc.remove(n1)
	tc.waitMembers(2)
	waitRingsAgree(t, tc)
	r, err := client.Consume(ctx, consumeReq(remote, 2, limiter.SlidingLog))
	if err != nil {
		t.Fatal(err)
	}
	if r.GetVerdict().GetAllowed() {
		t.Fatal("after its owner left, the full key was allowed again: its hand-off was refused")
	}
}

// A token-only cluster (no TLS): the peer API refuses a caller with no
// token, with the client token, or with a wrong peer token, and serves the
// nodes, which present the peer token.
func TestPeerAPITokenOnly(t *testing.T) {
	tc := startCluster(t, 3, func(c *ringlimit.Config) {
		c.PeerToken = testPeerToken
		c.Security.AuthToken = testClientToken
	})
	addr := tc.nodes[0].GRPCAddr()
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		who  string
		opts []grpc.DialOption
	}{
		{"no credential", nil},
		{"the client token", []grpc.DialOption{withMD("authorization", "Bearer "+testClientToken)}},
		{"a wrong peer token", []grpc.DialOption{withMD("ringlimit-peer-token", "not-the-peer-secret-at-all")}},
		{"the peer token as a bearer token", []grpc.DialOption{withMD("authorization", "Bearer "+testPeerToken)}},
	} {
		conn := dialPlain(t, addr, append([]grpc.DialOption{plain}, c.opts...)...)
		wantRefused(t, c.who, peerCalls(ctx, pb.NewPeerClient(conn), "peer-attack"))
	}
	// The right token opens every method (a peer's empty requests are
	// answered), so the refusals above are the guard's, not the requests'.
	conn := dialPlain(t, addr, plain, withMD("ringlimit-peer-token", testPeerToken))
	for m, err := range peerCalls(ctx, pb.NewPeerClient(conn), "peer-attack") {
		if err != nil {
			t.Errorf("with the peer token: Peer/%s = %v, want served", m, err)
		}
	}
	opts, err := ringlimit.ClientCredentials(ringlimit.Security{AuthToken: testClientToken})
	if err != nil {
		t.Fatal(err)
	}
	checkPeersServed(t, tc, pb.NewLimiterClient(dialPlain(t, addr, opts...)))
}

// An mTLS cluster: a client certificate from the fleet's CA, alone or with
// the client token, does not open the peer API.
func TestPeerAPIWithTLS(t *testing.T) {
	ca := newTestCA(t, "ringlimit")
	var sec []ringlimit.Security
	for _, name := range []string{"node-0", "node-1", "node-2"} {
		c, k := ca.issue(name)
		sec = append(sec, ringlimit.Security{CertFile: c, KeyFile: k, CAFile: ca.File, AuthToken: testClientToken})
	}
	i := 0
	tc := startCluster(t, 3, func(c *ringlimit.Config) { c.Security = sec[i]; c.PeerToken = testPeerToken; i++ })
	cc, ck := ca.issue("client")
	client := ringlimit.Security{CertFile: cc, KeyFile: ck, CAFile: ca.File}
	addr := tc.nodes[0].GRPCAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	certOnly, err := ringlimit.ClientCredentials(client)
	if err != nil {
		t.Fatal(err)
	}
	client.AuthToken = testClientToken
	certAndToken, err := ringlimit.ClientCredentials(client)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "a client certificate", peerCalls(ctx, pb.NewPeerClient(dialPlain(t, addr, certOnly...)), "peer-attack"))
	wantRefused(t, "a client certificate and the client token", peerCalls(ctx, pb.NewPeerClient(dialPlain(t, addr, certAndToken...)), "peer-attack"))
	// Without a certificate the handshake itself fails.
	for m, err := range peerCalls(ctx, pb.NewPeerClient(dialPlain(t, addr)), "peer-attack") {
		if status.Code(err) != codes.Unavailable {
			t.Errorf("plaintext: Peer/%s = %v, want the connection refused (Unavailable)", m, err)
		}
	}
	checkPeersServed(t, tc, pb.NewLimiterClient(dialPlain(t, addr, certAndToken...)))
}

// A node whose peer API anyone beyond loopback may reach says so at start;
// one with a peer token, or on loopback, does not.
func TestOpenPeerAPIWarning(t *testing.T) {
	for _, c := range []struct {
		name, addr, token string
		warn              bool
	}{
		{"all interfaces, no token", "0.0.0.0:0", "", true},
		{"all interfaces, a token", "0.0.0.0:0", testPeerToken, false},
		{"loopback, no token", "127.0.0.1:0", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs testenv.LogBuffer
			cfg := nodeConfig("warn")
			cfg.GRPCAddr, cfg.PeerToken, cfg.HTTPAddr = c.addr, c.token, "-"
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			n, err := ringlimit.Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close(context.Background())
			got := strings.Contains(logs.String(), "can read and rewrite counts")
			if got != c.warn {
				t.Errorf("warning logged: %v, want %v; logs:\n%s", got, c.warn, logs.String())
			}
		})
	}
}

// A peer token that could be guessed, or that metadata would mangle, is
// refused at start, naming the field.
func TestPeerTokenErrors(t *testing.T) {
	for _, tok := range []string{"short", "has a space in it 0123456789", "tab\tinside-0123456789abc", "non-ascii-é-0123456789"} {
		cfg := nodeConfig("bad-token")
		cfg.PeerToken = tok
		n, err := ringlimit.Start(context.Background(), cfg)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != "PeerToken" {
			if n != nil {
				n.Close(context.Background())
			}
			t.Errorf("PeerToken %q: %v, want an InputError on PeerToken", tok, err)
		}
	}
}
