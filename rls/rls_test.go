package rls_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

// mongo_cps: 5 per minute for database=users and database=default, each
// its own counter; any other database has no limit.
func TestMongoCPS(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	lim := perUnit(5, minute)
	for i := range 5 {
		r := e.call("mongo_cps", 0, desc("database", "users"))
		want(t, fmt.Sprintf("users call %d", i+1), r.Statuses[0], ok, lim, int64(4-i))
		if r.OverallCode != ok {
			t.Fatalf("users call %d: overall %v", i+1, r.OverallCode)
		}
		if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d <= 0 || d > 2*time.Minute {
			t.Fatalf("users call %d: duration_until_reset %v, want within (0, 2m]", i+1, d)
		}
	}
	r := e.call("mongo_cps", 0, desc("database", "users"))
	want(t, "users call 6", r.Statuses[0], over, lim, 0)
	if r.OverallCode != over {
		t.Fatalf("users call 6: overall %v, want OVER_LIMIT", r.OverallCode)
	}
	// A fixed window aligned to the minute, as envoyproxy/ratelimit
	// counts: the clock stands at 12:00:00, so the minute resets in 60 s.
	if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d != time.Minute {
		t.Fatalf("users call 6: duration_until_reset %v, want 1m0s (the minute's end)", d)
	}
	// In whole seconds, rounded up: at 12:00:30.4 envoy says 60 - 30 = 30.
	e.clock.Advance(30*time.Second + 400*time.Millisecond)
	r = e.call("mongo_cps", 0, desc("database", "users"))
	want(t, "users call 7", r.Statuses[0], over, lim, 0)
	if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d != 30*time.Second {
		t.Fatalf("users call 7: duration_until_reset %v, want 30s", d)
	}
	// At 12:01:00 the next minute starts whole: no weight carried over.
	e.clock.Advance(29*time.Second + 600*time.Millisecond)
	r = e.call("mongo_cps", 0, desc("database", "users"))
	want(t, "users in the next minute", r.Statuses[0], ok, lim, 4)
	if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d != time.Minute {
		t.Fatalf("users in the next minute: duration_until_reset %v, want 1m0s", d)
	}
	want(t, "default", e.call("mongo_cps", 0, desc("database", "default")).Statuses[0], ok, lim, 4)
	want(t, "other database", e.call("mongo_cps", 0, desc("database", "orders")).Statuses[0], ok, nil, 0)
	want(t, "unknown domain", e.call("no_such_domain", 0, desc("database", "users")).Statuses[0], ok, nil, 0)
	e.clock.Advance(2 * time.Minute)
	want(t, "users after 2 minutes", e.call("mongo_cps", 0, desc("database", "users")).Statuses[0], ok, lim, 4)
}

// rl: envoy ratelimit's example config, every kind of rule.
func TestRLExample(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	steps := []struct {
		name  string
		d     *ratelimitv3.RateLimitDescriptor
		code  rlsv3.RateLimitResponse_Code
		limit *rlsv3.RateLimitResponse_RateLimit
		rem   int64
	}{
		{"proxy->mock 1", desc("source_cluster", "proxy", "destination_cluster", "mock"), ok, perUnit(1, minute), 0},
		{"proxy->mock 2", desc("source_cluster", "proxy", "destination_cluster", "mock"), over, perUnit(1, minute), 0},
		{"proxy->other", desc("source_cluster", "proxy", "destination_cluster", "other"), ok, nil, 0},
		{"proxy alone", desc("source_cluster", "proxy"), ok, nil, 0},
		{"foo=a 1", desc("foo", "a"), ok, perUnit(2, minute), 1},
		{"foo=a 2", desc("foo", "a"), ok, perUnit(2, minute), 0},
		{"foo=a 3", desc("foo", "a"), over, perUnit(2, minute), 0},
		{"foo=b counts apart", desc("foo", "b"), ok, perUnit(2, minute), 1},
		{"foo,bar 1", desc("foo", "a", "bar", "x"), ok, perUnit(3, minute), 2},
		{"foo,bar 2", desc("foo", "a", "bar", "x"), ok, perUnit(3, minute), 1},
		{"foo,bar=banned", desc("foo", "a", "bar", "banned"), over, perUnit(0, minute), 0},
		{"foo,bar=banned again", desc("foo", "a", "bar", "banned"), over, perUnit(0, minute), 0},
		{"foo,baz 1", desc("foo", "a", "baz", "x"), ok, perUnit(1, second), 0},
		{"foo,baz 2", desc("foo", "a", "baz", "x"), over, perUnit(1, second), 0},
		{"foo,baz=shady 1", desc("foo", "a", "baz", "shady"), ok, perUnit(1, minute), 0},
		{"foo,baz=shady 2 (shadow)", desc("foo", "a", "baz", "shady"), ok, perUnit(1, minute), 0},
		{"foo,baz=shady 3 (shadow)", desc("foo", "a", "baz", "shady"), ok, perUnit(1, minute), 0},
		{"foo,bay unlimited", desc("foo", "a", "bay", "x"), ok, nil, math.MaxUint32},
		{"qux unlimited", desc("qux", "x"), ok, nil, math.MaxUint32},
		{"too deep", desc("foo", "a", "bar", "x", "more", "y"), ok, nil, 0},
	}
	for i, s := range steps {
		r := e.call("rl", 0, s.d)
		want(t, fmt.Sprintf("step %d (%s)", i, s.name), r.Statuses[0], s.code, s.limit, s.rem)
		if r.OverallCode != s.code {
			t.Fatalf("step %d (%s): overall %v, want %v", i, s.name, r.OverallCode, s.code)
		}
	}
	// Shadow mode counted the first call: the counter itself is full.
	v, err := e.store.PeekMany(context.Background(), []limiter.Entry{{Key: "envoy/rl/foo=a/baz=shady", Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: time.Minute}}})
	if err != nil || v.Allowed {
		t.Fatalf("shadow counter: %+v %v; want full (shadow mode counts)", v, err)
	}
	e.clock.Advance(time.Second) // the next second is a new window
	want(t, "foo,baz after 2s", e.call("rl", 0, desc("foo", "a", "baz", "x")).Statuses[0], ok, perUnit(1, second), 0)
}

// messaging: two descriptors in one request are counted independently;
// the answer is OVER_LIMIT when either is.
func TestMessagingDescriptorsCountApart(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	marketing := desc("message_type", "marketing", "to_number", "2061111111")
	number := desc("to_number", "2061111111")
	for i := range 5 {
		r := e.call("messaging", 0, marketing, number)
		want(t, fmt.Sprintf("call %d marketing", i+1), r.Statuses[0], ok, perUnit(5, day), int64(4-i))
		want(t, fmt.Sprintf("call %d number", i+1), r.Statuses[1], ok, perUnit(100, day), int64(99-i))
	}
	r := e.call("messaging", 0, marketing, number)
	if r.OverallCode != over {
		t.Fatalf("call 6: overall %v, want OVER_LIMIT", r.OverallCode)
	}
	want(t, "call 6 marketing", r.Statuses[0], over, perUnit(5, day), 0)
	want(t, "call 6 number (still counted)", r.Statuses[1], ok, perUnit(100, day), 94)
	want(t, "number alone", e.call("messaging", 0, number).Statuses[0], ok, perUnit(100, day), 93)
	want(t, "another number's marketing", e.call("messaging", 0, desc("message_type", "marketing", "to_number", "2062222222")).Statuses[0], ok, perUnit(5, day), 4)
}

// edge_proxy_per_ip: key=value beats key-only; requests_per_unit 0 refuses
// every request.
func TestEdgeProxyPerIP(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	for i := range 10 {
		want(t, fmt.Sprintf("50.0.0.1 call %d", i+1), e.call("edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.1")).Statuses[0], ok, perUnit(10, second), int64(9-i))
	}
	want(t, "50.0.0.1 call 11", e.call("edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.1")).Statuses[0], over, perUnit(10, second), 0)
	r := e.call("edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5"))
	want(t, "50.0.0.5 (blocked)", r.Statuses[0], over, perUnit(0, second), 0)
	if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d != time.Second {
		t.Fatalf("blocked: duration_until_reset %v, want 1s", d)
	}
}

// Example 4: a descriptor deeper than the rules gets no limit.
func TestDepthMustMatch(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	want(t, "two entries", e.call("example4", 0, desc("key", "value", "subkey", "subvalue")).Statuses[0], ok, nil, 0)
	want(t, "one entry", e.call("example4", 0, desc("key", "value")).Statuses[0], ok, perUnit(300, second), 299)
}

// Examples 5, 6, 8, 9: unlimited, shadow mode, detailed_metric, wildcard.
func TestReadmeExamples(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	want(t, "ldap", e.call("internal", 0, desc("ldap", "x")).Statuses[0], ok, nil, math.MaxUint32)
	want(t, "azure", e.call("internal", 0, desc("azure", "x")).Statuses[0], ok, perUnit(100, minute), 99)
	for i := range 15 {
		want(t, fmt.Sprintf("user-a call %d (shadow)", i+1), e.call("example6", 0, desc("service", "auth", "user", "user-a")).Statuses[0], ok, perUnit(10, second), -1)
	}
	for i := range 20 {
		want(t, fmt.Sprintf("user-b call %d", i+1), e.call("example6", 0, desc("service", "auth", "user", "user-b")).Statuses[0], ok, perUnit(20, second), int64(19-i))
	}
	want(t, "user-b call 21", e.call("example6", 0, desc("service", "auth", "user", "user-b")).Statuses[0], over, perUnit(20, second), 0)
	want(t, "key1 unspecified", e.call("example8", 0, desc("key1", "whatever")).Statuses[0], ok, perUnit(10, minute), 9)
	want(t, "key1 value1", e.call("example8", 0, desc("key1", "value1")).Statuses[0], ok, perUnit(20, minute), 19)
	want(t, "value_1", e.call("example9", 0, desc("key1", "value_1")).Statuses[0], ok, perUnit(20, minute), 19)
	want(t, "value_1 again", e.call("example9", 0, desc("key1", "value_1")).Statuses[0], ok, perUnit(20, minute), 18)
	want(t, "value_2 counts apart", e.call("example9", 0, desc("key1", "value_2")).Statuses[0], ok, perUnit(20, minute), 19)
	want(t, "no prefix", e.call("example9", 0, desc("key1", "other")).Statuses[0], ok, nil, 0)
}

// Example 7: a limit named in another matched limit's replaces is not
// counted; alone it still applies.
func TestReplaces(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	specific := desc("key_1", "value_1", "user", "bkthomps")
	replacing := desc("key_2", "value_2", "user", "bkthomps")
	ten := perUnit(10, second)
	five := &rlsv3.RateLimitResponse_RateLimit{Name: "specific_limit", RequestsPerUnit: 5, Unit: second}
	for i := range 10 {
		r := e.call("example7", 0, specific, replacing)
		want(t, fmt.Sprintf("both %d: replaced", i+1), r.Statuses[0], ok, nil, 0)
		want(t, fmt.Sprintf("both %d: replacing", i+1), r.Statuses[1], ok, ten, int64(9-i))
	}
	r := e.call("example7", 0, specific, replacing)
	want(t, "both 11: replacing", r.Statuses[1], over, ten, 0)
	for i := range 5 {
		want(t, fmt.Sprintf("specific alone %d (untouched by the replaced calls)", i+1), e.call("example7", 0, specific).Statuses[0], ok, five, int64(4-i))
	}
	want(t, "specific alone 6", e.call("example7", 0, specific).Statuses[0], over, five, 0)
}

// hits_addend: the request's (0 means 1) and a descriptor's own (0 means
// look without counting); more than the limit is over without counting.
func TestHitsAddend(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	lim := perUnit(5, minute)
	users := desc("database", "users")
	want(t, "3 hits", e.call("mongo_cps", 3, users).Statuses[0], ok, lim, 2)
	want(t, "3 more hits", e.call("mongo_cps", 3, users).Statuses[0], over, lim, 0)
	want(t, "6 hits on 5", e.call("mongo_cps", 6, desc("database", "default")).Statuses[0], over, lim, 0)
	peek := desc("database", "users")
	peek.HitsAddend = wrapperspb.UInt64(0)
	want(t, "descriptor hits 0 (look only)", e.call("mongo_cps", 0, peek).Statuses[0], ok, lim, 2)
	two := desc("database", "users")
	two.HitsAddend = wrapperspb.UInt64(2)
	want(t, "descriptor hits 2 override request's 1", e.call("mongo_cps", 1, two).Statuses[0], ok, lim, 0)
	want(t, "full", e.call("mongo_cps", 0, users).Statuses[0], over, lim, 0)
	want(t, "default untouched by the 6-hit call", e.call("mongo_cps", 0, desc("database", "default")).Statuses[0], ok, lim, 4)
}

// A descriptor's own limit (Envoy's override) replaces the config's.
func TestLimitOverride(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	d := desc("database", "users")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_SECOND}
	lim := perUnit(2, second)
	want(t, "override 1", e.call("mongo_cps", 0, d).Statuses[0], ok, lim, 1)
	want(t, "override 2", e.call("mongo_cps", 0, d).Statuses[0], ok, lim, 0)
	want(t, "override 3", e.call("mongo_cps", 0, d).Statuses[0], over, lim, 0)
	want(t, "config limit counts apart", e.call("mongo_cps", 0, desc("database", "users")).Statuses[0], ok, perUnit(5, minute), 4)
	d.Limit.Unit = typev3.RateLimitUnit_UNKNOWN
	if _, err := e.try("mongo_cps", 0, d); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[0].limit.unit") {
		t.Fatalf("unknown override unit: %v, want InvalidArgument naming descriptors[0].limit.unit", err)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	cases := []struct {
		name   string
		domain string
		ds     []*ratelimitv3.RateLimitDescriptor
		code   codes.Code
		field  string
	}{
		{"no domain", "", []*ratelimitv3.RateLimitDescriptor{desc("database", "users")}, codes.InvalidArgument, "domain"},
		{"no descriptors", "mongo_cps", nil, codes.InvalidArgument, "descriptors"},
		{"value past the key bound", "example9", []*ratelimitv3.RateLimitDescriptor{desc("key1", "value"+strings.Repeat("x", 2000))}, codes.ResourceExhausted, "key"},
	}
	for _, c := range cases {
		_, err := e.try(c.domain, 0, c.ds...)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want %v naming %q", c.name, err, c.code, c.field)
		}
	}
	want(t, "empty descriptor", e.call("mongo_cps", 0, desc()).Statuses[0], ok, nil, 0)
}

// Of 40 concurrent calls on a 5-per-minute rule, exactly 5 pass.
func TestConcurrentCalls(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	var mu sync.Mutex
	passed := 0
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			r, err := e.try("mongo_cps", 0, desc("database", "users"))
			if err != nil {
				t.Error(err)
				return
			}
			if r.OverallCode == ok {
				mu.Lock()
				passed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if passed != 5 {
		t.Fatalf("%d of 40 concurrent calls passed, want 5", passed)
	}
}

func TestReload(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	if err := e.svc.Reload(rls.Config{Algorithm: "no-such"}); err == nil {
		t.Fatal("Reload with a bad algorithm: no error")
	}
	want(t, "old rules still serve", e.call("mongo_cps", 0, desc("database", "users")).Statuses[0], ok, perUnit(5, minute), 4)
	err := e.svc.Reload(rls.Config{Clock: e.clock, Domains: []rls.Domain{{Name: "fresh", Descriptors: []rls.Descriptor{{Key: "k", RateLimit: &rls.RateLimit{Unit: "hour", RequestsPerUnit: 1}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.svc.Domains(); len(got) != 1 || got[0] != "fresh" {
		t.Fatalf("Domains() = %v, want [fresh]", got)
	}
	want(t, "new rule", e.call("fresh", 0, desc("k", "v")).Statuses[0], ok, perUnit(1, rlsv3.RateLimitResponse_RateLimit_HOUR), 0)
	want(t, "old domain gone", e.call("mongo_cps", 0, desc("database", "users")).Statuses[0], ok, nil, 0)
}
