package rls_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

func descriptors(n int) []*ratelimitv3.RateLimitDescriptor {
	ds := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = desc("remote_address", "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256))
	}
	return ds
}

// A request holds at most MaxDescriptors descriptors (default 64); past
// it the caller gets ResourceExhausted naming descriptors, and nothing is
// counted. (Checked: without the bound, 100,000 descriptors were taken,
// one goroutine each, and this test fails on the 65.)
func TestMaxDescriptors(t *testing.T) {
	e := newEnv(t, loadExamples(t))
	if r := e.call("edge_proxy_per_ip", 0, descriptors(rls.DefaultMaxDescriptors)...); r.OverallCode != ok {
		t.Fatalf("%d descriptors: %v", rls.DefaultMaxDescriptors, r.OverallCode)
	}
	_, err := e.try("edge_proxy_per_ip", 0, descriptors(rls.DefaultMaxDescriptors+1)...)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "descriptors") || !strings.Contains(err.Error(), "65") {
		t.Fatalf("65 descriptors: %v; want ResourceExhausted naming descriptors and the count", err)
	}
	// The refused request counted nothing: the first 64 addresses have
	// used 1 of 10, the 65th none.
	want(t, "after the refusal", e.call("edge_proxy_per_ip", 0, desc("remote_address", "10.0.0.64")).Statuses[0], ok, perUnit(10, second), 9)

	cfg := loadExamples(t)
	cfg.MaxDescriptors = 2
	small := newEnv(t, cfg)
	if _, err := small.try("edge_proxy_per_ip", 0, descriptors(3)...); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("3 descriptors past MaxDescriptors 2: %v", err)
	}
	if err := (rls.Config{MaxDescriptors: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "MaxDescriptors") {
		t.Fatalf("MaxDescriptors -1: %v, want an error naming it", err)
	}
}

// gate is a Store that holds every call until released, counting how
// many it holds at once. It wraps the real Memory store.
type gate struct {
	limiter.Store
	mu       sync.Mutex
	held     int
	peak     int
	released chan struct{}
}

func (g *gate) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	g.mu.Lock()
	g.held++
	g.peak = max(g.peak, g.held)
	g.mu.Unlock()
	<-g.released
	g.mu.Lock()
	g.held--
	g.mu.Unlock()
	return g.Store.ConsumeMany(ctx, entries)
}

// One request's descriptors go to the store on a bounded number of
// goroutines, never one each. synctest.Wait returns once every goroutine
// of the request is blocked, so the count of calls held then is exact.
// (Checked: with one goroutine per descriptor, as before, all 64 are held
// at once and the test fails.)
func TestDescriptorsBoundedGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := limiter.NewMemory(limiter.MemoryConfig{Clock: limiter.NewFakeClock(epoch)})
		defer mem.Close()
		g := &gate{Store: mem, released: make(chan struct{})}
		svc, err := rls.New(g, loadExamples(t))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan *rlsv3.RateLimitResponse)
		go func() {
			r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: descriptors(64)})
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		synctest.Wait()
		g.mu.Lock()
		held := g.held
		g.mu.Unlock()
		if held < 2 || held > 8 {
			t.Errorf("64 descriptors: %d store calls at once, want 2 to 8", held)
		}
		close(g.released)
		r := <-done
		if len(r.GetStatuses()) != 64 || r.OverallCode != ok {
			t.Fatalf("response: %d statuses, %v", len(r.GetStatuses()), r.OverallCode)
		}
		for i, st := range r.GetStatuses() {
			if st.GetLimitRemaining() != 9 {
				t.Fatalf("descriptor %d: remaining %d, want 9 (each counted once)", i, st.GetLimitRemaining())
			}
		}
		if g.peak > 8 {
			t.Fatalf("peak %d store calls at once, want at most 8", g.peak)
		}
	})
}

// response_headers_to_add: off by default; when on, the RateLimit
// headers of the descriptor with the fewest uses left (or the one over
// its limit), with envoy ratelimit's default names or the configured
// ones. (Checked: with the headers never added, the test fails at the
// first call.)
func TestResponseHeaders(t *testing.T) {
	off := newEnv(t, loadExamples(t))
	if h := off.call("mongo_cps", 0, desc("database", "users")).GetResponseHeadersToAdd(); len(h) != 0 {
		t.Fatalf("headers off: %v", h)
	}
	cfg := loadExamples(t)
	cfg.ResponseHeaders = true
	e := newEnv(t, cfg)
	headers := func(r *rlsv3.RateLimitResponse) string {
		var parts []string
		for _, h := range r.GetResponseHeadersToAdd() {
			parts = append(parts, h.GetKey()+"="+h.GetValue())
		}
		return strings.Join(parts, " ")
	}
	reset := func(r *rlsv3.RateLimitResponse, i int) int64 {
		d := r.Statuses[i].GetDurationUntilReset().AsDuration()
		return int64((d + time.Second - 1) / time.Second)
	}
	r := e.call("mongo_cps", 0, desc("database", "users"))
	if got, want := headers(r), fmt.Sprintf("RateLimit-Limit=5 RateLimit-Remaining=4 RateLimit-Reset=%d", reset(r, 0)); got != want {
		t.Fatalf("one descriptor: %q, want %q", got, want)
	}
	if reset(r, 0) < 1 {
		t.Fatalf("reset %d, want at least 1 s", reset(r, 0))
	}
	// Two descriptors: the headers follow the one with fewer uses left.
	marketing := desc("message_type", "marketing", "to_number", "2061111111")
	number := desc("to_number", "2061111111")
	r = e.call("messaging", 0, number, marketing)
	if got := headers(r); !strings.HasPrefix(got, "RateLimit-Limit=5 RateLimit-Remaining=4 ") {
		t.Fatalf("two descriptors: %q, want marketing's 5 and 4", got)
	}
	// No limit among the descriptors: no headers.
	if r := e.call("mongo_cps", 0, desc("database", "orders")); len(r.GetResponseHeadersToAdd()) != 0 {
		t.Fatalf("no limit: %v", r.GetResponseHeadersToAdd())
	}
	// Over the limit: the refusing descriptor's, remaining 0.
	for range 4 {
		e.call("mongo_cps", 0, desc("database", "users"))
	}
	r = e.call("mongo_cps", 0, desc("database", "default"), desc("database", "users"))
	if got := headers(r); r.OverallCode != over || !strings.HasPrefix(got, "RateLimit-Limit=5 RateLimit-Remaining=0 ") {
		t.Fatalf("over: %v %q", r.OverallCode, got)
	}
	cfg.LimitHeader, cfg.RemainingHeader, cfg.ResetHeader = "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"
	named := newEnv(t, cfg)
	if got := headers(named.call("mongo_cps", 0, desc("database", "users"))); !strings.HasPrefix(got, "X-RateLimit-Limit=5 X-RateLimit-Remaining=4 X-RateLimit-Reset=") {
		t.Fatalf("named headers: %q", got)
	}
}
