package rls_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ringlimit/ringlimit/limiter"
)

// A store in shadow mode (a node's --shadow, limiter.Shadow) is envoy's
// global SHADOW_MODE: descriptors over their limit keep their
// OVER_LIMIT status and envoy's statistics (over_limit, not shadow_mode),
// the overall code is OK, and global_shadow_mode counts the requests it
// turned OK. The counts are enforcing's.
func TestStoreShadowIsGlobalShadowMode(t *testing.T) {
	var shadow *limiter.ShadowStore
	e := newEnvWith(t, loadExamples(t), func(m *limiter.Memory) limiter.Store {
		shadow = limiter.Shadow(m, limiter.ShadowLogger(slog.New(slog.DiscardHandler)))
		return shadow
	})
	lim := perUnit(5, minute)
	for i := range 5 {
		r := e.call("mongo_cps", 0, desc("database", "users"))
		want(t, fmt.Sprintf("call %d", i+1), r.Statuses[0], ok, lim, int64(4-i))
		if r.OverallCode != ok {
			t.Fatalf("call %d: overall %v", i+1, r.OverallCode)
		}
	}
	for i := range 2 {
		r := e.call("mongo_cps", 0, desc("database", "users"))
		want(t, fmt.Sprintf("call %d", i+6), r.Statuses[0], over, lim, 0)
		if r.OverallCode != ok {
			t.Fatalf("call %d: overall %v, want OK (the store is in shadow mode)", i+6, r.OverallCode)
		}
	}
	labels := []string{"domain", "mongo_cps", "key", "database_users"}
	for _, m := range []struct {
		name string
		want float64
	}{
		{"ratelimit_service_rate_limit_total_hits_total", 7},
		{"ratelimit_service_rate_limit_within_limit_total", 5},
		{"ratelimit_service_rate_limit_over_limit_total", 2},
		{"ratelimit_service_rate_limit_shadow_mode_total", 0},
	} {
		if got := metricValue(t, e.svc, m.name, labels...); got != m.want {
			t.Errorf("%s = %v, want %v", m.name, got, m.want)
		}
	}
	if got := metricValue(t, e.svc, "ratelimit_service_global_shadow_mode_total"); got != 2 {
		t.Errorf("global_shadow_mode = %v, want 2", got)
	}
	if st := shadow.Stats(); st.Calls != 7 || st.WouldRefuse != 2 {
		t.Errorf("ShadowStats = %+v, want 7 calls, 2 would refuse", st)
	}
	// The counter holds the five admitted hits, as enforcing would.
	v, err := e.store.PeekMany(context.Background(), []limiter.Entry{{Key: "envoy/mongo_cps/database=users", Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 6, Window: 60e9}}})
	if err != nil || !v.Allowed || v.Remaining != 0 {
		t.Fatalf("the counter under a limit of 6: %+v, %v; want room for one (5 recorded; a peek says what is left after it)", v, err)
	}
}

// names records the limit names a store is asked about.
type names struct {
	limiter.Store
	mu  sync.Mutex
	got []string
}

func (n *names) ConsumeMany(ctx context.Context, es []limiter.Entry) (limiter.Verdict, error) {
	n.mu.Lock()
	for _, e := range es {
		n.got = append(n.got, e.Limit.Name)
	}
	n.mu.Unlock()
	return n.Store.ConsumeMany(ctx, es)
}

func (n *names) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	g := n.got
	n.got = nil
	return g
}

// A rule's limit is named by its domain and descriptor keys, as envoy's
// statistics name it, never by a request's values (detailed_metric and
// value_to_metric change the metric key, not the name); a limit a request
// carries (an override) is unnamed.
func TestLimitNames(t *testing.T) {
	var rec *names
	e := newEnvWith(t, loadExamples(t), func(m *limiter.Memory) limiter.Store {
		rec = &names{Store: m}
		return rec
	})
	for _, c := range []struct {
		domain string
		d      *ratelimitv3.RateLimitDescriptor
		want   string
	}{
		{"mongo_cps", desc("database", "users"), "mongo_cps.database_users"},
		{"rl", desc("foo", "a", "bar", "x"), "rl.foo.bar"},
		{"edge_proxy_per_ip", desc("remote_address", "10.0.0.1"), "edge_proxy_per_ip.remote_address"},
		{"example6", desc("service", "auth", "user", "user-b"), "example6.service.user_user-b"},
	} {
		e.call(c.domain, 0, c.d)
		if got := rec.take(); len(got) != 1 || got[0] != c.want {
			t.Errorf("%s %v: limit names %q, want [%q]", c.domain, c.d, got, c.want)
		}
	}
	d := desc("database", "users")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: 1}
	e.call("mongo_cps", 0, d)
	if got := rec.take(); len(got) != 1 || got[0] != "" {
		t.Errorf("an override: limit names %q, want [\"\"]", got)
	}
}

// Config.ShadowMode is envoy's SHADOW_MODE over any store: a request over
// a limit, one refused without reaching the store (requests_per_unit 0)
// included, keeps its descriptors' OVER_LIMIT and is answered OK overall.
func TestConfigShadowMode(t *testing.T) {
	cfg := loadExamples(t)
	cfg.ShadowMode = true
	e := newEnv(t, cfg)
	for i, c := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		code rlsv3.RateLimitResponse_Code
	}{
		{desc("foo", "a"), ok},
		{desc("foo", "a"), ok},
		{desc("foo", "a"), over},
		{desc("foo", "a", "bar", "banned"), over},
	} {
		r := e.call("rl", 0, c.d)
		if r.Statuses[0].GetCode() != c.code || r.OverallCode != ok {
			t.Fatalf("step %d: status %v overall %v, want %v and OK", i, r.Statuses[0].GetCode(), r.OverallCode, c.code)
		}
	}
	if got := metricValue(t, e.svc, "ratelimit_service_global_shadow_mode_total"); got != 2 {
		t.Errorf("global_shadow_mode = %v, want 2", got)
	}
	if got := metricValue(t, e.svc, "ratelimit_service_rate_limit_over_limit_total", "domain", "rl", "key", "foo"); got != 1 {
		t.Errorf("over_limit of foo = %v, want 1 (statistics as usual)", got)
	}
}
