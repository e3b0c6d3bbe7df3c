package ringlimit_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// ---- helpers ----

// metricsHTTPS reads /metrics from nodes with TLS, whose HTTP port serves
// HTTPS; metrics need no client certificate, and the test trusts the node.
var metricsHTTPS = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// scrape reads a node's /metrics over HTTP (HTTPS when the node answers a
// plaintext request with 400, as a TLS port does) into "name{labels}" -> value.
func scrape(t *testing.T, n *ringlimit.Node) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err == nil && resp.StatusCode == http.StatusBadRequest {
		resp.Body.Close()
		resp, err = metricsHTTPS.Get("https://" + n.HTTPAddr() + "/metrics")
		metricsHTTPS.CloseIdleConnections()
	}
	if err != nil {
		t.Fatalf("scrape %s: %v", n.Name(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", n.Name(), resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape %s: bad line %q", n.Name(), line)
		}
		out[line[:i]] = v
	}
	return out
}

// ringVersion is the version label of a scrape's ringlimit_ring_info
// ("" when there is none).
func ringVersion(m map[string]float64) string {
	for k := range m {
		if v, ok := strings.CutPrefix(k, `ringlimit_ring_info{version="`); ok {
			return strings.TrimSuffix(v, `"}`)
		}
	}
	return ""
}

// keyOwnedBy finds a key with the prefix whose owner is the named node.
func keyOwnedBy(t *testing.T, n *ringlimit.Node, owner, prefix string) string {
	t.Helper()
	for i := range 10000 {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if o, err := n.Owner(k); err == nil && o == owner {
			return k
		}
	}
	t.Fatalf("no key %s-* owned by %s", prefix, owner)
	return ""
}

func owner(t *testing.T, n *ringlimit.Node, key string) string {
	t.Helper()
	o, err := n.Owner(key)
	if err != nil {
		t.Fatalf("owner of %s on %s: %v", key, n.Name(), err)
	}
	return o
}

// waitRingsAgree polls until every node names the same owner for a sample
// of keys and the same ring version.
func waitRingsAgree(t *testing.T, tc *testCluster) {
	t.Helper()
	ns := tc.live()
	waitFor(t, "the nodes' rings to agree", func() bool {
		v := ringVersion(scrape(t, ns[0]))
		for _, n := range ns[1:] {
			if ringVersion(scrape(t, n)) != v {
				return false
			}
			for i := range 64 {
				k := "agree-" + strconv.Itoa(i)
				if owner(t, n, k) != owner(t, ns[0], k) {
					return false
				}
			}
		}
		return true
	})
}

func dialPlain(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func consumeReq(key string, uses int64, alg limiter.Algorithm) *pb.ConsumeRequest {
	return &pb.ConsumeRequest{Entries: rpc.EntriesToPB([]limiter.Entry{{Key: key, Limit: limiter.Limit{Algorithm: alg, Uses: uses, Window: time.Minute}}})}
}

func httpStatus(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	code, b, err := httpDo(http.DefaultClient, method, url, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return code, b
}

// httpDo sends a request with the bearer token (when not empty) and
// returns the status and body.
func httpDo(c *http.Client, method, url, token, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// waitFor polls cond every 10 ms until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- metrics ----

// A scrape after known traffic shows the expected counts.
func TestMetricsAfterKnownTraffic(t *testing.T) {
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.Replicas = -1 })
	n0, n1 := tc.nodes[0], tc.nodes[1]
	waitRingsAgree(t, tc)
	local := keyOwnedBy(t, n0, n0.Name(), "local")
	remote := keyOwnedBy(t, n0, n1.Name(), "remote")
	bucket := keyOwnedBy(t, n0, n0.Name(), "bucket")
	log3 := limiter.Limit{Uses: 3, Window: time.Minute}
	ctx := context.Background()
	run := func(key string, l limiter.Limit, times int) {
		for range times {
			if _, err := n0.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: l}}); err != nil {
				t.Fatalf("consume %s: %v", key, err)
			}
		}
	}
	run(local, log3, 4)  // 3 allowed, 1 refused, decided by n0
	run(remote, log3, 5) // 3 allowed, 2 refused; 4 forwarded to n1, the 5th refused from the refusal cache
	run(bucket, limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 5, Window: time.Minute}, 1)
	if _, err := n0.ConsumeMany(ctx, []limiter.Entry{{Key: "", Limit: log3}}); err == nil {
		t.Fatal("empty key: no error")
	}
	for _, k := range []string{local, remote, bucket} {
		if o0, o1 := owner(t, n0, k), owner(t, n1, k); o0 != o1 {
			t.Fatalf("the ring changed during the test: %s is owned by %s on %s, %s on %s", k, o0, n0.Name(), o1, n1.Name())
		}
	}
	m0, m1 := scrape(t, n0), scrape(t, n1)
	want := []struct {
		m    map[string]float64
		name string
		val  float64
	}{
		{m0, `ringlimit_decisions_total{algorithm="sliding-log",limit="",result="allowed"}`, 6},
		{m0, `ringlimit_decisions_total{algorithm="sliding-log",limit="",result="refused"}`, 3},
		{m0, `ringlimit_decisions_total{algorithm="sliding-log",limit="",result="error"}`, 1},
		{m0, `ringlimit_decisions_total{algorithm="token-bucket",limit="",result="allowed"}`, 1},
		{m0, `ringlimit_decisions_total{algorithm="sliding-window",limit="",result="allowed"}`, 0},
		{m0, `ringlimit_decision_seconds_count{limit=""}`, 11},
		{m0, `ringlimit_forwards_total`, 4},
		{m0, `ringlimit_peer_forwards_total{peer="` + n1.Name() + `"}`, 4},
		{m0, `ringlimit_refusal_cache_hits_total`, 1},
		{m0, `ringlimit_local_decisions_total`, 5},
		{m0, `ringlimit_fallbacks_total{policy="local"}`, 0},
		{m0, `ringlimit_keys{role="owner"}`, 2},
		{m0, `ringlimit_keys{role="replica"}`, 0},
		{m0, `ringlimit_ring_members`, 2},
		{m1, `ringlimit_forwarded_served_total`, 4},
		{m1, `ringlimit_keys{role="owner"}`, 1},
		{m1, `ringlimit_ring_members`, 2},
		{m1, `ringlimit_decision_seconds_count{limit=""}`, 0},
	}
	for _, w := range want {
		got, ok := w.m[w.name]
		if !ok || got != w.val {
			t.Errorf("%s = %v (present %v), want %v", w.name, got, ok, w.val)
		}
	}
	if m0["ringlimit_forward_rpcs_total"] < 1 || m0["ringlimit_forward_rpcs_total"] > 4 {
		t.Errorf("ringlimit_forward_rpcs_total = %v, want 1..4", m0["ringlimit_forward_rpcs_total"])
	}
	if v0, v1 := ringVersion(m0), ringVersion(m1); v0 == "" || v0 == "0000000000000000" || v0 != v1 {
		t.Errorf("ring versions %q and %q, want equal and not 0", v0, v1)
	}
	if _, ok := m0["ringlimit_memberlist_health_score"]; !ok {
		t.Error("ringlimit_memberlist_health_score missing")
	}
	for name := range m0 {
		if !strings.HasPrefix(name, "ringlimit_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("metric %s is not prefixed ringlimit_ (nor go_ or process_, the runtime's)", name)
		}
	}
}

// ---- health ----

// /healthz, /readyz and the gRPC health service flip at join and during
// shutdown.
func TestHealthFlips(t *testing.T) {
	// A seed address nobody listens on yet: the node keeps trying to join.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seed := l.Addr().String()
	l.Close()
	cfg := nodeConfig("late")
	cfg.Join = []string{seed}
	b, err := ringlimit.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			b.Close(context.Background())
		}
	})
	base := "http://" + b.HTTPAddr()
	health := healthpb.NewHealthClient(dialPlain(t, b.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return r.GetStatus()
	}
	if code, _ := httpStatus(t, "GET", base+"/healthz", "", ""); code != 200 {
		t.Fatalf("/healthz while joining: %d, want 200", code)
	}
	if code, body := httpStatus(t, "GET", base+"/readyz", "", ""); code != 503 || !strings.Contains(body, "joining") {
		t.Fatalf("/readyz while joining: %d %s, want 503 joining", code, body)
	}
	if s := check(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health while joining: %v, want NOT_SERVING", s)
	}
	_, err = pb.NewLimiterClient(dialPlain(t, b.GRPCAddr())).Consume(ctx, consumeReq("k", 1, limiter.SlidingLog))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a call before the node joined: %v, want Unavailable", err)
	}
	// The seed comes up; the node joins it on its next try.
	seedCfg := nodeConfig("seed")
	seedCfg.GossipAddr = seed
	a, err := ringlimit.Start(context.Background(), seedCfg)
	if err != nil {
		t.Fatalf("start seed on %s: %v", seed, err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	waitFor(t, "the node to join", func() bool {
		code, _ := httpStatus(t, "GET", base+"/readyz", "", "")
		return code == 200
	})
	if s := check(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health after join: %v, want SERVING", s)
	}
	// Shutdown: a watcher sees NOT_SERVING, /readyz answers 503 while the
	// node hands off and leaves, and Close does not wait on the watch.
	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v, want SERVING", r, err)
	}
	seen := make(chan string, 1)
	go func() {
		last := ""
		for {
			code, body, err := get(base + "/readyz")
			if err != nil {
				seen <- last
				return
			}
			if code == 503 {
				last = body
			}
		}
	}()
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer closeCancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- b.Close(closeCtx) }()
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch during shutdown: %v %v, want NOT_SERVING", r, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed = true
	took := time.Since(start)
	if closeCtx.Err() != nil {
		t.Errorf("Close took its whole deadline (%v): an open health watch held the gRPC server", took)
	}
	if _, err := watch.Recv(); err == nil {
		t.Error("watch still open after Close")
	}
	if last := <-seen; !strings.Contains(last, "shutting down") {
		t.Errorf("/readyz never answered 503 shutting down before the listener closed (last 503 body %q)", last)
	}
}

func get(url string) (int, string, error) {
	return httpDo(http.DefaultClient, http.MethodGet, url, "", "")
}

// ---- bearer token ----

// With a token, the client API (gRPC and JSON) needs it; health, metrics
// and the peer API do not.
func TestBearerToken(t *testing.T) {
	const token = "s3cret-token"
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.Security.AuthToken = token })
	n0, n1 := tc.nodes[0], tc.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := pb.NewLimiterClient(dialPlain(t, n0.GRPCAddr()))
	remote := keyOwnedBy(t, n0, n1.Name(), "auth")
	for _, c := range []struct {
		name string
		md   []string
		code codes.Code
	}{
		{"no token", nil, codes.Unauthenticated},
		{"wrong token", []string{"authorization", "Bearer nope"}, codes.Unauthenticated},
		{"no Bearer prefix", []string{"authorization", token}, codes.Unauthenticated},
		{"right token, forwarded to the owner", []string{"authorization", "Bearer " + token}, codes.OK},
	} {
		cctx := ctx
		if c.md != nil {
			cctx = metadata.AppendToOutgoingContext(ctx, c.md...)
		}
		_, err := client.Consume(cctx, consumeReq(remote, 5, limiter.SlidingLog))
		if status.Code(err) != c.code {
			t.Errorf("gRPC Consume with %s: %v, want %v", c.name, err, c.code)
		}
		_, err = client.Members(cctx, &pb.MembersRequest{})
		if status.Code(err) != c.code {
			t.Errorf("gRPC Members with %s: %v, want %v", c.name, err, c.code)
		}
	}
	// The token as a dial option, the way ClientCredentials builds it.
	opts, err := ringlimit.ClientCredentials(ringlimit.Security{AuthToken: token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewLimiterClient(dialPlain(t, n1.GRPCAddr(), opts...)).Consume(ctx, consumeReq(remote, 5, limiter.SlidingLog)); err != nil {
		t.Errorf("Consume with ClientCredentials' token: %v", err)
	}
	if _, err := healthpb.NewHealthClient(dialPlain(t, n0.GRPCAddr())).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("gRPC health without a token: %v, want open", err)
	}
	base := "http://" + n0.HTTPAddr()
	body := `{"entries":[{"key":"json-k","limit":"5/1m"}]}`
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"POST", "/v1/consume", "", body, 401},
		{"POST", "/v1/consume", "wrong", body, 401},
		{"POST", "/v1/peek", "", body, 401},
		{"GET", "/v1/members", "", "", 401},
		{"POST", "/v1/consume", token, body, 200},
		{"GET", "/healthz", "", "", 200},
		{"GET", "/readyz", "", "", 200},
		{"GET", "/metrics", "", "", 200},
	} {
		if code, got := httpStatus(t, c.method, base+c.path, c.token, c.body); code != c.want {
			t.Errorf("%s %s with token %q: %d %s, want %d", c.method, c.path, c.token, code, got, c.want)
		}
	}
}

// ---- bounds ----

// Past a bound a caller gets ResourceExhausted (HTTP 413) naming the
// field; malformed input gets InvalidArgument (HTTP 400).
func TestBounds(t *testing.T) {
	tc := startCluster(t, 1, func(c *ringlimit.Config) {
		c.Bounds = limiter.Bounds{MaxKeyBytes: 16, MaxEntries: 2, MaxLogUses: 10, MaxKeys: 3}
	})
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := pb.NewLimiterClient(dialPlain(t, n.GRPCAddr()))
	win := limiter.Limit{Uses: 5, Window: time.Minute}
	entries := func(es ...limiter.Entry) *pb.ConsumeRequest { return &pb.ConsumeRequest{Entries: rpc.EntriesToPB(es)} }
	cases := []struct {
		name  string
		req   *pb.ConsumeRequest
		code  codes.Code
		field string
	}{
		{"key of 17 bytes", entries(limiter.Entry{Key: strings.Repeat("k", 17), Limit: win}), codes.ResourceExhausted, "entries[0].key"},
		{"3 entries", entries(limiter.Entry{Key: "a", Limit: win}, limiter.Entry{Key: "b", Limit: win}, limiter.Entry{Key: "c", Limit: win}), codes.ResourceExhausted, "entries"},
		{"sliding log of 11 uses", entries(limiter.Entry{Key: "a", Limit: limiter.Limit{Uses: 11, Window: time.Minute}}), codes.ResourceExhausted, "entries[0].limit.uses"},
		{"empty key", entries(limiter.Entry{Limit: win}), codes.InvalidArgument, "entries[0].key"},
		{"0 uses", entries(limiter.Entry{Key: "a", Limit: limiter.Limit{Window: time.Minute}}), codes.InvalidArgument, "entries[0].limit.uses"},
		{"cost above uses", entries(limiter.Entry{Key: "a", Limit: win, Cost: 6}), codes.InvalidArgument, "entries[0].cost"},
		{"no entries", entries(), codes.InvalidArgument, "entries"},
	}
	for _, c := range cases {
		_, err := client.Consume(ctx, c.req)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want %v naming %s", c.name, err, c.code, c.field)
		}
	}
	// Keys per node: the fourth new counter is refused, old ones still count.
	for i := range 3 {
		if _, err := client.Consume(ctx, consumeReq(fmt.Sprintf("key-%d", i), 5, limiter.SlidingLog)); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	if _, err := client.Consume(ctx, consumeReq("key-3", 5, limiter.SlidingLog)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 4th key with MaxKeys 3: %v, want ResourceExhausted", err)
	}
	if _, err := client.Consume(ctx, consumeReq("key-0", 5, limiter.SlidingLog)); err != nil {
		t.Errorf("an existing key at MaxKeys: %v", err)
	}
	base := "http://" + n.HTTPAddr()
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"entries":[{"key":"` + strings.Repeat("k", 17) + `","limit":"5/1m"}]}`, 413},
		{`{"entries":[{"key":"","limit":"5/1m"}]}`, 400},
		{`{"entries":[{"key":"a","limit":"five"}]}`, 400},
	} {
		if code, got := httpStatus(t, "POST", base+"/v1/consume", "", c.body); code != c.want {
			t.Errorf("JSON %s: %d %s, want %d", c.body, code, got, c.want)
		}
	}
}
