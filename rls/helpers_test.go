package rls_test

import (
	"context"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

// env is a real gRPC server on 127.0.0.1 serving the service over a
// Memory store on a fake clock, and a client generated from
// go-control-plane's types.
type env struct {
	t      *testing.T
	clock  *limiter.FakeClock
	store  *limiter.Memory
	svc    *rls.Service
	client rlsv3.RateLimitServiceClient
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newEnv(t *testing.T, cfg rls.Config) *env {
	t.Helper()
	return newEnvWith(t, cfg, nil)
}

// newEnvWith is newEnv with the service's store made by wrap from the
// Memory (nil: the Memory itself).
func newEnvWith(t *testing.T, cfg rls.Config, wrap func(*limiter.Memory) limiter.Store) *env {
	t.Helper()
	e := &env{t: t, clock: limiter.NewFakeClock(epoch)}
	e.store = limiter.NewMemory(limiter.MemoryConfig{Clock: e.clock})
	t.Cleanup(func() { e.store.Close() })
	cfg.Clock = e.clock
	var store limiter.Store = e.store
	if wrap != nil {
		store = wrap(e.store)
	}
	var err error
	if e.svc, err = rls.New(store, cfg); err != nil {
		t.Fatalf("rls.New: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	e.svc.Register(srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop(); <-done })
	e.client = rlsv3.NewRateLimitServiceClient(conn)
	return e
}

// loadExamples loads testdata/envoy: envoy ratelimit's documented examples.
func loadExamples(t *testing.T) rls.Config {
	t.Helper()
	cfg, err := rls.Load("testdata/envoy")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (e *env) call(domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	e.t.Helper()
	resp, err := e.try(domain, hits, ds...)
	if err != nil {
		e.t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	if len(resp.GetStatuses()) != len(ds) {
		e.t.Fatalf("ShouldRateLimit(%s): %d statuses for %d descriptors", domain, len(resp.GetStatuses()), len(ds))
	}
	return resp
}

func (e *env) try(domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// want checks one descriptor status: its code, the limit it reports (nil:
// none) and the remaining uses (-1: do not check).
func want(t *testing.T, step string, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, limit *rlsv3.RateLimitResponse_RateLimit, remaining int64) {
	t.Helper()
	if st.GetCode() != code {
		t.Fatalf("%s: code %v, want %v (status %v)", step, st.GetCode(), code, st)
	}
	got := st.GetCurrentLimit()
	switch {
	case limit == nil && got != nil:
		t.Fatalf("%s: current_limit %v, want none", step, got)
	case limit != nil && (got.GetRequestsPerUnit() != limit.RequestsPerUnit || got.GetUnit() != limit.Unit || got.GetName() != limit.Name):
		t.Fatalf("%s: current_limit %v, want %v", step, got, limit)
	}
	if remaining >= 0 && int64(st.GetLimitRemaining()) != remaining {
		t.Fatalf("%s: limit_remaining %d, want %d", step, st.GetLimitRemaining(), remaining)
	}
}

func perUnit(n uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: n, Unit: unit}
}

var (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
)

// metricValue gathers the service's metrics and returns the value of
// name with the given label pairs (0 when there is no such series).
func metricValue(t *testing.T, svc *rls.Service, name string, labelPairs ...string) float64 {
	t.Helper()
	for _, f := range gather(t, svc) {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labelPairs); i += 2 {
				if got[labelPairs[i]] != labelPairs[i+1] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// gather collects the service's metrics through a pedantic registry
// (which checks them as it goes).
func gather(t *testing.T, svc *rls.Service) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(svc.Collector()); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return fams
}

// seriesCount is the number of series of the metric name.
func seriesCount(t *testing.T, svc *rls.Service, name string) int {
	t.Helper()
	for _, f := range gather(t, svc) {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}
