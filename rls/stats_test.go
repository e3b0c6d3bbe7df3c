package rls_test

import (
	"fmt"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/ringlimit/ringlimit/rls"
)

// counts reads the five envoy ratelimit counters of one domain and key.
func counts(t *testing.T, svc *rls.Service, domain, key string) [5]float64 {
	t.Helper()
	var out [5]float64
	for i, name := range []string{"total_hits", "within_limit", "near_limit", "over_limit", "shadow_mode"} {
		out[i] = metricValue(t, svc, "ratelimit_service_rate_limit_"+name+"_total", "domain", domain, "key", key)
	}
	return out
}

// The counters follow envoy's base limiter hit by hit: total_hits every
// hit; within_limit the hits of a request within the limit; near_limit
// the hits past 80% of the limit and up to it; over_limit the hits past
// it. (Checked: with the near-limit share left out of a refusal, step 3's
// near_limit is 0 and the test fails.)
func TestMetricsCounts(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	users := desc("database", "users") // 5 per minute: near past 4
	steps := []struct {
		hits uint32
		code any
		want [5]float64 // total, within, near, over, shadow after the step
	}{
		{3, ok, [5]float64{3, 3, 0, 0, 0}},   // 0 -> 3
		{1, ok, [5]float64{4, 4, 0, 0, 0}},   // 3 -> 4: at 80%, not past it
		{2, over, [5]float64{6, 4, 1, 1, 0}}, // 4 + 2 = 6: 1 hit near (the 5th), 1 over
		{1, ok, [5]float64{7, 5, 2, 1, 0}},   // 4 -> 5 (the refusal took nothing): near
		{1, over, [5]float64{8, 5, 2, 2, 0}}, // already full: over
	}
	for i, s := range steps {
		r := e.call("mongo_cps", s.hits, users)
		if r.Statuses[0].GetCode() != s.code {
			t.Fatalf("step %d: %v, want %v", i+1, r.Statuses[0].GetCode(), s.code)
		}
		if got := counts(t, e.svc, "mongo_cps", "database_users"); got != s.want {
			t.Fatalf("step %d: total/within/near/over/shadow %v, want %v", i+1, got, s.want)
		}
	}
	// requests_per_unit 0: every hit is over.
	e.call("edge_proxy_per_ip", 2, desc("remote_address", "50.0.0.5"))
	if got := counts(t, e.svc, "edge_proxy_per_ip", "remote_address_50.0.0.5"); got != [5]float64{2, 0, 0, 2, 0} {
		t.Fatalf("blocked address: %v, want 2 hits, 2 over", got)
	}
	// No rule, unlimited and look-only descriptors make no series.
	e.call("mongo_cps", 0, desc("database", "orders"))
	e.call("internal", 0, desc("ldap", "x"))
	if n := seriesCount(t, e.svc, "ratelimit_service_rate_limit_total_hits_total"); n != 2 {
		t.Fatalf("%d total_hits series, want 2 (users, the blocked address)", n)
	}
}

// shadow_mode: hits over the limit of a shadow rule are over_limit and
// shadow_mode, and answered OK.
func TestMetricsShadowMode(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	for range 12 {
		if r := e.call("example6", 0, desc("service", "auth", "user", "user-a")); r.OverallCode != ok {
			t.Fatalf("shadow rule answered %v", r.OverallCode)
		}
	}
	// 10 per second, near past 8: hits 9 and 10 near, 11 and 12 over.
	if got := counts(t, e.svc, "example6", "service.user_user-a"); got != [5]float64{12, 10, 2, 2, 2} {
		t.Fatalf("total/within/near/over/shadow %v, want [12 10 2 2 2]", got)
	}
}

// The metric key is the rule's path, so request values reach a label
// only where the config asks (detailed_metric, value_to_metric), and
// those keys are bounded by MaxMetricKeys. (Checked: with the rule's key
// replaced by the request's values for every rule, the key-only rule
// makes one series per address and the test fails.)
func TestMetricsKeysAndCardinality(t *testing.T) {
	cfg := loadExamples(t)
	cfg.Domains = append(cfg.Domains, parseDomain(t, `domain: v2m
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        descriptors:
          - key: subject
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: action
    value: read*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: resource
        rate_limit: {unit: minute, requests_per_unit: 60}
`).Domains...)
	cfg.MaxMetricKeys = 3
	e := newEnv(t, cfg)
	for i := range 20 {
		e.call("edge_proxy_per_ip", 0, desc("remote_address", fmt.Sprintf("10.0.0.%d", i)))
	}
	if n := seriesCount(t, e.svc, "ratelimit_service_rate_limit_total_hits_total"); n != 1 {
		t.Fatalf("20 addresses on a key-only rule made %d series, want 1", n)
	}
	if got := counts(t, e.svc, "edge_proxy_per_ip", "remote_address"); got[0] != 20 {
		t.Fatalf("remote_address: %v, want 20 hits", got)
	}
	// value_to_metric: the request's values where the rule has none.
	e.call("v2m", 0, desc("route", "api", "method", "GET", "subject", "123"))
	if got := counts(t, e.svc, "v2m", "route_api.method_GET.subject"); got[0] != 1 {
		t.Fatalf("value_to_metric key: %v; want 1 hit on route_api.method_GET.subject", got)
	}
	// share_threshold wins over value_to_metric: the wildcard, not the value.
	e.call("v2m", 0, desc("action", "readfile", "resource", "doc"))
	if got := counts(t, e.svc, "v2m", "action_read*.resource"); got[0] != 1 {
		t.Fatalf("share_threshold key: %v; want 1 hit on action_read*.resource", got)
	}
	// detailed_metric: every entry's key_value.
	e.call("example8", 0, desc("key1", "unspecified"))
	if got := counts(t, e.svc, "example8", "key1_unspecified"); got[0] != 1 {
		t.Fatalf("detailed_metric key: %v; want 1 hit on key1_unspecified", got)
	}
	// Two runtime keys so far (the share_threshold one is the rule's
	// own): one more is kept, then MaxMetricKeys 3 is reached and the
	// rest fold into the rule's key.
	for i := range 10 {
		e.call("example8", 0, desc("key1", fmt.Sprintf("more-%d", i)))
	}
	if got := counts(t, e.svc, "example8", "key1_more-0"); got[0] != 1 {
		t.Fatalf("the third runtime key: %v; want 1 hit on key1_more-0", got)
	}
	if got := counts(t, e.svc, "example8", "key1"); got[0] != 9 {
		t.Fatalf("folded detailed keys: %v; want 9 hits on key1", got)
	}
	// A limit override is named by its values, like envoy, under the
	// same bound: folded into its keys.
	o := desc("database", "users")
	o.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 9, Unit: typev3.RateLimitUnit_MINUTE}
	e.call("mongo_cps", 0, o)
	if got := counts(t, e.svc, "mongo_cps", "database"); got[0] != 1 {
		t.Fatalf("override past the bound: %v; want 1 hit on database", got)
	}
	if n := seriesCount(t, e.svc, "ratelimit_service_rate_limit_total_hits_total"); n != 7 {
		t.Fatalf("%d series, want 7 (3 runtime keys, 4 rule keys)", n)
	}
}

// The metrics pass the registry's own checks and promtool's naming rule
// that a counter ends in _total.
func TestMetricsLint(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	e.call("mongo_cps", 0, desc("database", "users"))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.svc.Collector())
	problems, err := promlint.NewWithMetricFamilies(gather(t, e.svc)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	fams, _ := reg.Gather()
	for _, f := range fams {
		if !strings.HasSuffix(f.GetName(), "_total") {
			t.Errorf("counter %s does not end in _total", f.GetName())
		}
	}
}
