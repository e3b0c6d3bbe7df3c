package ringlimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// --shadow: every way into a node (Go, gRPC, JSON, the fleet client)
// lets a call over the limit through, marked shadowed; the decision
// metrics count it as refused under its limit's name, and
// ringlimit_shadow_refusals_total counts it; the log has one throttled
// line with the key hashed. The owner's count is what enforcing records:
// a node without --shadow refuses at once.
func TestNodeShadow(t *testing.T) {
	logs := &testenv.LogBuffer{}
	tc := startCluster(t, 2, func(c *ringlimit.Config) {
		c.Shadow = c.Name == "node-0"
		if c.Shadow {
			c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		}
	})
	n0, n1 := tc.nodes[0], tc.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	login := limiter.Limit{Uses: 1, Window: time.Hour, Name: "login"}
	key := keyOwnedBy(t, n0, n1.Name(), "shadow") // forwarded: the owner counts it, node-0 shadows it

	// Go: the first call passes, the next two would have been refused.
	for i, shadowed := range []bool{false, true, true} {
		v, err := limiter.Consume(ctx, n0, key, login)
		if err != nil || !v.Allowed || v.Shadowed != shadowed {
			t.Fatalf("Go call %d: %+v, %v; want allowed, shadowed %v", i, v, err, shadowed)
		}
	}
	// gRPC: the field reaches the caller, the name travels with the call.
	client := pb.NewLimiterClient(dialPlain(t, n0.GRPCAddr()))
	resp, err := client.Consume(ctx, &pb.ConsumeRequest{Entries: []*pb.Entry{{Key: []byte(key), Limit: &pb.Limit{Uses: 1, WindowMs: 3_600_000, Name: "login"}}}})
	if err != nil || !resp.GetVerdict().GetAllowed() || !resp.GetVerdict().GetShadowed() || resp.GetVerdict().GetRetryAfterUs() <= 0 {
		t.Fatalf("gRPC: %v, %v; want allowed, shadowed, with the refusal's wait", resp, err)
	}
	// JSON: "shadowed": true, and no Retry-After (the call was let through).
	a := postJSON(t, "http://"+n0.HTTPAddr()+"/v1/consume", `{"entries":[{"key":"`+key+`","limit":"1/1h","name":"login"}]}`)
	if v := a.verdict(t, "JSON"); !v.Allowed || !v.Shadowed || !strings.Contains(a.body, `"shadowed":true`) || a.header.Get("Retry-After") != "" {
		t.Fatalf("JSON: %s %v; want allowed, \"shadowed\":true, no Retry-After", a.body, a.header)
	}
	// The fleet client, sent to node-0 only.
	fleet := dialCluster(t, &testCluster{t: t, nodes: []*ringlimit.Node{n0}}, func(c *ringlimit.ClientConfig) { c.RoundRobin = true })
	if v, err := limiter.Consume(ctx, fleet, key, login); err != nil || !v.Allowed || !v.Shadowed {
		t.Fatalf("fleet client: %+v, %v; want allowed and shadowed", v, err)
	}
	// Enforcing: node-1 refuses, and the count is the one allowed call
	// (a refusal records nothing): peek on a limit of 2 has room for one.
	if v, err := limiter.Consume(ctx, n1, key, login); err != nil || v.Allowed || v.Shadowed {
		t.Fatalf("node-1 (enforcing): %+v, %v; want refused", v, err)
	}
	two := login
	two.Uses = 2
	if v, err := limiter.Peek(ctx, n1, key, two); err != nil || !v.Allowed || v.Remaining != 0 {
		t.Fatalf("peek under a limit of 2: %+v, %v; want room for exactly one (1 use recorded)", v, err)
	}
	m := scrape(t, n0)
	for series, want := range map[string]float64{
		`ringlimit_decisions_total{algorithm="sliding-log",limit="login",result="allowed"}`: 1,
		`ringlimit_decisions_total{algorithm="sliding-log",limit="login",result="refused"}`: 5,
		`ringlimit_shadow_refusals_total{limit="login"}`:                                    5,
		`ringlimit_shadow_refusals_total{limit=""}`:                                         0,
		`ringlimit_decision_seconds_count{limit="login"}`:                                   6,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (served %v), want %v", series, got, ok, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var shadowLines []string
	for _, l := range lines {
		if strings.Contains(l, limiter.MsgWouldRefuse) {
			shadowLines = append(shadowLines, l)
		}
	}
	if len(shadowLines) != 1 || !strings.Contains(shadowLines[0], "limit=login") || !strings.Contains(shadowLines[0], "key_hash=") || strings.Contains(shadowLines[0], key) {
		t.Fatalf("would-refuse lines %q, want one (throttled) naming the limit, the key hashed", shadowLines)
	}
}

// The limit label is bounded: names past MaxLimitNames are counted under
// "(other)", and a call's bad name is refused, naming the field.
func TestMetricsLimitNamesBounded(t *testing.T) {
	tc := startCluster(t, 1, nil)
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range ringlimit.MaxLimitNames + 5 {
		l := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1_000_000, Window: time.Second, Name: fmt.Sprintf("rule-%d", i)}
		if _, err := limiter.Consume(ctx, n, "names", l); err != nil {
			t.Fatal(err)
		}
	}
	m := scrape(t, n)
	names := map[string]bool{}
	for series := range m {
		if rest, ok := strings.CutPrefix(series, `ringlimit_shadow_refusals_total{limit="`); ok {
			names[strings.TrimSuffix(rest, `"}`)] = true
		}
	}
	if len(names) != ringlimit.MaxLimitNames+2 || !names["(other)"] || !names[""] || names[fmt.Sprintf("rule-%d", ringlimit.MaxLimitNames)] {
		t.Fatalf("%d limit labels, want %d named, \"(other)\" and \"\"", len(names), ringlimit.MaxLimitNames)
	}
	if got := m[`ringlimit_decisions_total{algorithm="token-bucket",limit="(other)",result="allowed"}`]; got != 5 {
		t.Fatalf("(other) allowed = %v, want 5", got)
	}
	a := postJSON(t, "http://"+n.HTTPAddr()+"/v1/consume", `{"entries":[{"key":"k","limit":"1/1h","name":"`+strings.Repeat("n", limiter.MaxNameBytes+1)+`"}]}`)
	a.problem(t, "a name past the bound", http.StatusBadRequest, "entries[0].limit.name")
}

// A node's --shadow is envoy's SHADOW_MODE for its rate-limit service:
// over the limit, and refused without counting (requests_per_unit 0),
// descriptors say OVER_LIMIT and the request is OK.
func TestNodeShadowEnvoy(t *testing.T) {
	tc := startCluster(t, 1, func(c *ringlimit.Config) { c.Shadow, c.Envoy = true, envoyConfig(t) })
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := func(kv ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		r, err := n.Envoy().ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if r := call("foo", "a"); r.GetStatuses()[0].GetCode() != want || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("foo=a %d: %v, want status %v, overall OK", i, r, want)
		}
	}
	if r := call("foo", "a", "bar", "banned"); r.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("bar=banned: %v, want status OVER_LIMIT, overall OK", r)
	}
	m := scrape(t, n)
	if got := m["ratelimit_service_global_shadow_mode_total"]; got != 2 {
		t.Errorf("ratelimit_service_global_shadow_mode_total = %v, want 2", got)
	}
	if got := m[`ringlimit_shadow_refusals_total{limit="rl.foo"}`]; got != 1 {
		t.Errorf(`ringlimit_shadow_refusals_total{limit="rl.foo"} = %v, want 1`, got)
	}
}
