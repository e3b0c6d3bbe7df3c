package ringlimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

// rlsClients dials every node's gRPC port with go-control-plane's
// generated RateLimitService client.
func rlsClients(t *testing.T, tc *testCluster) []rlsv3.RateLimitServiceClient {
	t.Helper()
	var out []rlsv3.RateLimitServiceClient
	for _, n := range tc.live() {
		conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		out = append(out, rlsv3.NewRateLimitServiceClient(conn))
	}
	return out
}

func rlsDesc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// Envoy's rate-limit service on a 3-node fleet: whichever node Envoy
// calls, the fleet counts each descriptor once, at its owner.
func TestEnvoyRLSCluster(t *testing.T) {
	cfg, err := rls.Load("rls/testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	tc := startCluster(t, 3, func(c *ringlimit.Config) { c.Envoy = &cfg })
	clients := rlsClients(t, tc)
	// The service counts envoy's units in fixed windows aligned to the
	// clock: start with 40 s of this minute left, so that no minute ends
	// between the calls below and the peek that checks their count.
	if left := time.Minute - time.Duration(time.Now().UnixNano()%int64(time.Minute)); left < 40*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	call := func(i int, domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		r, err := clients[i%len(clients)].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
		if err != nil {
			t.Fatalf("call %d through node %d: %v", i, i%len(clients), err)
		}
		return r
	}
	// mongo_cps: 5 per minute per database, shared by the three nodes
	// (calls go round them, so two of every three are forwarded).
	for _, db := range []string{"users", "default"} {
		for i := range 5 {
			r := call(i, "mongo_cps", rlsDesc("database", db))
			if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != uint32(4-i) {
				t.Fatalf("%s call %d through node %d: %v, want OK with %d remaining", db, i+1, i%3, r, 4-i)
			}
		}
		for i := range 3 {
			if r := call(i, "mongo_cps", rlsDesc("database", db)); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("%s call %d through node %d: %v, want OVER_LIMIT (the fleet counted 5)", db, 6+i, i, r)
			}
		}
	}
	// messaging: independent descriptors, through different nodes.
	marketing, number := rlsDesc("message_type", "marketing", "to_number", "2061111111"), rlsDesc("to_number", "2061111111")
	for i := range 5 {
		if r := call(i, "messaging", marketing, number); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("messaging call %d: %v", i+1, r)
		}
	}
	r := call(5, "messaging", marketing, number)
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		r.Statuses[1].Code != rlsv3.RateLimitResponse_OK || r.Statuses[1].LimitRemaining != 94 {
		t.Fatalf("messaging call 6: %v, want OVER_LIMIT with the number's own limit still counted (94 left)", r)
	}
	// A blocked address, and an address with its own 10/s, on every node.
	for i := range 3 {
		if r := call(i, "edge_proxy_per_ip", rlsDesc("remote_address", "50.0.0.5")); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("blocked address through node %d: %v", i, r)
		}
	}
	// The counts live in the nodes' engines under the documented keys.
	v, err := tc.nodes[1].PeekMany(ctx, []limiter.Entry{{Key: "envoy/mongo_cps/database=users", Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 5, Window: time.Minute}}})
	if err != nil || v.Allowed {
		t.Fatalf("peek of the users counter: %+v %v; want full", v, err)
	}
	var forwarded int64
	for _, n := range tc.nodes {
		forwarded += n.Peers().Stats().Calls.Load()
	}
	if forwarded == 0 {
		t.Fatal("no call was forwarded: the test did not cross the fleet")
	}
}

// A bad Envoy configuration stops Start with the field named; a node
// without one does not serve the service.
func TestEnvoyRLSConfigErrors(t *testing.T) {
	cfg := nodeConfig("bad-envoy")
	cfg.Envoy = &rls.Config{Domains: []rls.Domain{{Name: "d", Descriptors: []rls.Descriptor{{Key: "k", RateLimit: &rls.RateLimit{Unit: "fortnight", RequestsPerUnit: 1}}}}}}
	n, err := ringlimit.Start(context.Background(), cfg)
	var ce *rls.ConfigError
	if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), "descriptors[0].rate_limit.unit") {
		if n != nil {
			n.Close(context.Background())
		}
		t.Fatalf("Start with a bad unit: %v, want a *rls.ConfigError naming descriptors[0].rate_limit.unit", err)
	}
	tc := startCluster(t, 1, nil)
	_, err = rlsClients(t, tc)[0].ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("k", "v")}})
	if err == nil || !strings.Contains(err.Error(), "Unimplemented") {
		t.Fatalf("node without Envoy config: %v, want Unimplemented", err)
	}
}
