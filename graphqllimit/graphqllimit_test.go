package graphqllimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/graphqllimit"
	"github.com/ringlimit/ringlimit/graphqllimit/internal/testserver"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a store that records every call made to it.
type recorder struct {
	limiter.Store
	mu    sync.Mutex
	calls [][]limiter.Entry
	fail  error
}

func (r *recorder) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	r.mu.Lock()
	r.calls = append(r.calls, slices.Clone(entries))
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		return limiter.Verdict{}, fail
	}
	return r.Store.ConsumeMany(ctx, entries)
}

func (r *recorder) reset() [][]limiter.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

// server is the small gqlgen server of internal/testserver behind a
// Limiter, on a real HTTP listener.
type server struct {
	t     *testing.T
	url   string
	res   *testserver.Resolver
	store *recorder
	clock *limiter.FakeClock
}

// newServer starts the test server; wrap=false leaves out Limiter.HTTP.
func newServer(t *testing.T, opts graphqllimit.Options, wrap bool) *server {
	t.Helper()
	clock := limiter.NewFakeClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	mem := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	t.Cleanup(func() { mem.Close() })
	rec := &recorder{Store: mem}
	res := &testserver.Resolver{}
	es := testserver.NewExecutableSchema(testserver.New(res))
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	lim, err := graphqllimit.New(rec, es, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := handler.New(es)
	srv.AddTransport(transport.POST{})
	srv.Use(lim)
	var h http.Handler = srv
	if wrap {
		h = lim.HTTP(srv)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return &server{t: t, url: ts.URL, res: res, store: rec, clock: clock}
}

type gqlError struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

type response struct {
	Data   map[string]any `json:"data"`
	Errors []gqlError     `json:"errors"`
}

// do posts a query as client (the X-Forwarded-For the trusted loopback
// proxy sets; "" for none).
func (s *server) do(client, query string, vars map[string]any) response {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest("POST", s.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if client != "" {
		req.Header.Set("X-Forwarded-For", client)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r response
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &r); err != nil {
		s.t.Fatalf("%s: %v", raw, err)
	}
	return r
}

// trusted makes the loopback test client a trusted proxy, so each request
// names its client in X-Forwarded-For.
var trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// onlyError returns the response's one error, failing otherwise.
func onlyError(t *testing.T, what string, r response) gqlError {
	t.Helper()
	if len(r.Errors) != 1 {
		t.Fatalf("%s: errors %+v, want exactly one", what, r.Errors)
	}
	return r.Errors[0]
}

// A field limited by the schema's @rateLimit passes its uses, then gets a
// RATE_LIMITED error with the wait, and its resolver does not run; other
// fields of the request still resolve.
func TestDirectiveLimitRefuses(t *testing.T) {
	s := newServer(t, graphqllimit.Options{TrustedProxies: trusted}, true)
	for i := range 2 {
		r := s.do("203.0.113.1", `{ hello search(q: "x") { id } }`, nil)
		if len(r.Errors) != 0 || r.Data["hello"] != "hello" {
			t.Fatalf("search %d of its 2/1m: %+v", i+1, r)
		}
	}
	s.clock.Advance(10 * time.Second)
	r := s.do("203.0.113.1", `{ hello report search(q: "x") { id } }`, nil)
	// The request's limited fields are counted as one batch, refused as a
	// whole: report (within its limit) is refused with search, and both
	// name the wait after which the whole request passes, search's.
	if len(r.Errors) != 2 {
		t.Fatalf("search 3: errors %+v, want search's and report's", r.Errors)
	}
	for _, e := range r.Errors {
		if e.Extensions["code"] != graphqllimit.CodeRateLimited || e.Extensions["retryAfter"] != float64(50) ||
			e.Extensions["retryAfterMs"] != float64(50_000) || e.Extensions["retryAt"] != "2026-01-01T09:01:00.000Z" {
			t.Fatalf("search 3: %+v, want code RATE_LIMITED, retryAfter 50, retryAfterMs 50000, retryAt 09:01:00.000Z", e)
		}
	}
	if got := s.res.Searches.Load(); got != 2 {
		t.Fatalf("the search resolver ran %d times, want 2: a refused field must not run", got)
	}
	// search is non-null: the refusal nulls the whole data (GraphQL's null
	// propagation); a nullable limited field is nulled alone.
	if r.Data != nil {
		t.Fatalf("search 3: data %v, want null (search is non-null)", r.Data)
	}
	if got := s.res.Reports.Load(); got != 0 {
		t.Fatalf("report ran %d times in a refused request, want 0", got)
	}
	// The refused request counted nothing: report still has its one use.
	r = s.do("203.0.113.1", `{ hello report }`, nil)
	if len(r.Errors) != 0 || r.Data["report"] != "report" || r.Data["hello"] != "hello" {
		t.Fatalf("report after a refused batch: %+v, want it to pass", r)
	}
	r = s.do("203.0.113.1", `{ hello report }`, nil)
	e := onlyError(t, "report 2", r)
	if e.Extensions["code"] != graphqllimit.CodeRateLimited || len(e.Path) != 1 || e.Path[0] != "report" {
		t.Fatalf("report 2: %+v, want RATE_LIMITED at path [report]", e)
	}
	if r.Data["hello"] != "hello" || r.Data["report"] != nil {
		t.Fatalf("report 2: data %v, want hello resolved and report null", r.Data)
	}
	// Another client has its own counters.
	if r := s.do("198.51.100.7", `{ report }`, nil); len(r.Errors) != 0 {
		t.Fatalf("another client's report: %+v, want it to pass", r)
	}
}

// Every limited field a request selects, nested ones and fragments
// included, is counted in one store call before any resolver runs; a
// field selected twice costs 2.
func TestOneStoreCallPerRequest(t *testing.T) {
	s := newServer(t, graphqllimit.Options{TrustedProxies: trusted}, true)
	r := s.do("203.0.113.1", `
		query { hello search(q: "a") { id ...P } report items { price } }
		fragment P on Item { price }`, nil)
	if len(r.Errors) != 0 {
		t.Fatalf("%+v", r)
	}
	calls := s.store.reset()
	if len(calls) != 1 {
		t.Fatalf("%d store calls for one request, want 1: %v", len(calls), calls)
	}
	got := map[string]int64{}
	for _, e := range calls[0] {
		got[e.Key] = e.Cost
	}
	want := map[string]int64{
		"graphql:Query.search:203.0.113.1": 1,
		"graphql:Query.report:203.0.113.1": 1,
		"graphql:Item.price:203.0.113.1":   2, // under search and under items
	}
	if len(got) != len(want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	for k, c := range want {
		if got[k] != c {
			t.Fatalf("entries %v, want %v", got, want)
		}
	}
	// A request without limited fields makes no store call; neither does
	// a limited field left out by @skip.
	s.do("203.0.113.1", `query($s: Boolean!) { hello report @skip(if: $s) }`, map[string]any{"s": true})
	if calls := s.store.reset(); len(calls) != 0 {
		t.Fatalf("store calls %v for a request with no limited field, want none", calls)
	}
}

// Limits in the options: a mutation limited by Options.Fields, and a rule
// that changes a directive's limit.
func TestOptionLimits(t *testing.T) {
	s := newServer(t, graphqllimit.Options{TrustedProxies: trusted, Fields: []graphqllimit.Rule{
		graphqllimit.Field("Mutation.login", limiter.Limit{Uses: 1, Window: time.Minute}),
		graphqllimit.Field("Query.report", limiter.Limit{Uses: 2, Window: time.Minute}),
	}}, true)
	if r := s.do("203.0.113.1", `mutation { login(user: "ann") }`, nil); len(r.Errors) != 0 {
		t.Fatalf("login 1: %+v", r)
	}
	e := onlyError(t, "login 2", s.do("203.0.113.1", `mutation { login(user: "ann") }`, nil))
	if e.Extensions["code"] != graphqllimit.CodeRateLimited || e.Extensions["retryAfter"] != float64(60) {
		t.Fatalf("login 2: %+v, want RATE_LIMITED retry in 60 s", e)
	}
	if got := s.res.Logins.Load(); got != 1 {
		t.Fatalf("login ran %d times, want 1", got)
	}
	for i := range 2 {
		if r := s.do("203.0.113.1", `{ report }`, nil); len(r.Errors) != 0 {
			t.Fatalf("report %d of the option's 2/1m (the directive says 1/1h): %+v", i+1, r)
		}
	}
	if r := s.do("203.0.113.1", `{ report }`, nil); len(r.Errors) != 1 {
		t.Fatalf("report 3: %+v, want refused", r)
	}
}

// A request with no client key follows OnMissingKey.
func TestMissingKey(t *testing.T) {
	deny := newServer(t, graphqllimit.Options{}, false) // no Limiter.HTTP: no key
	r := deny.do("", `{ hello report }`, nil)
	if e := onlyError(t, "deny", r); e.Extensions["code"] != graphqllimit.CodeNoKey || r.Data["hello"] != "hello" {
		t.Fatalf("deny: %+v, want report refused with RATE_LIMIT_NO_KEY and hello resolved", r)
	}
	if calls := deny.store.reset(); len(calls) != 0 {
		t.Fatalf("deny: store calls %v, want none", calls)
	}
	allow := newServer(t, graphqllimit.Options{OnMissingKey: httplimit.MissingAllow}, false)
	for range 3 {
		if r := allow.do("", `{ report }`, nil); len(r.Errors) != 0 {
			t.Fatalf("allow: %+v, want report to run uncounted", r)
		}
	}
	shared := newServer(t, graphqllimit.Options{OnMissingKey: httplimit.MissingShared}, false)
	shared.do("", `{ report }`, nil)
	if r := shared.do("", `{ report }`, nil); len(r.Errors) != 1 || r.Errors[0].Extensions["code"] != graphqllimit.CodeRateLimited {
		t.Fatalf("shared: %+v, want the second keyless report refused by the shared counter", r)
	}
	// WithClient's key, put by a layer before the handler, is used.
	keyed := newServer(t, graphqllimit.Options{Key: func(ctx context.Context) string { return "user-42" }}, false)
	keyed.do("", `{ report }`, nil)
	if calls := keyed.store.reset(); len(calls) != 1 || calls[0][0].Key != "graphql:Query.report:user-42" {
		t.Fatalf("Options.Key: store calls %v, want one for user-42", calls)
	}
}

// A store failure follows OnStoreError: deny refuses the limited fields
// with the failure's correlation id, allow runs them uncounted.
func TestStoreFailure(t *testing.T) {
	down := errors.New("connection refused")
	deny := newServer(t, graphqllimit.Options{TrustedProxies: trusted}, true)
	deny.store.fail = down
	r := deny.do("203.0.113.1", `{ hello report }`, nil)
	e := onlyError(t, "deny", r)
	if e.Extensions["code"] != graphqllimit.CodeUnavailable || e.Extensions["correlationId"] == "" || r.Data["hello"] != "hello" {
		t.Fatalf("deny: %+v, want RATE_LIMIT_UNAVAILABLE with a correlation id", r)
	}
	allow := newServer(t, graphqllimit.Options{TrustedProxies: trusted, OnStoreError: fallback.Allow}, true)
	allow.store.fail = down
	if r := allow.do("203.0.113.1", `{ report }`, nil); len(r.Errors) != 0 || r.Data["report"] != "report" {
		t.Fatalf("allow: %+v, want report to run", r)
	}
}

// Bad options are an *limiter.InputError naming the option.
func TestBadOptions(t *testing.T) {
	es := testserver.NewExecutableSchema(testserver.New(&testserver.Resolver{}))
	mem := limiter.NewMemory(limiter.MemoryConfig{})
	defer mem.Close()
	ok := limiter.Limit{Uses: 1, Window: time.Minute}
	for _, c := range []struct {
		opts  graphqllimit.Options
		field string
	}{
		{graphqllimit.Options{Fields: []graphqllimit.Rule{graphqllimit.Field("Query.nope", ok)}}, "Fields[0].Field"},
		{graphqllimit.Options{Fields: []graphqllimit.Rule{graphqllimit.Field("search", ok)}}, "Fields[0].Field"},
		{graphqllimit.Options{Fields: []graphqllimit.Rule{graphqllimit.Field("Query.report", limiter.Limit{Uses: 0, Window: time.Minute})}}, "Fields[0].Limit.uses"},
		{graphqllimit.Options{Fields: []graphqllimit.Rule{{Field: "Query.report", Limit: ok, Cost: 2}}}, "Fields[0].Cost"},
		{graphqllimit.Options{Fields: []graphqllimit.Rule{graphqllimit.Field("Query.report", limiter.ConcurrencyLimit(2, time.Minute))}}, "Fields[0].Limit.algorithm"},
		{graphqllimit.Options{IPv6Prefix: 129}, "IPv6Prefix"},
		{graphqllimit.Options{OnStoreError: fallback.Local}, "OnStoreError"},
		{graphqllimit.Options{ProxyHeader: "X-Real-IP"}, "ProxyHeader"},
		{graphqllimit.Options{Bounds: limiter.Bounds{MaxLogUses: 3}, Fields: []graphqllimit.Rule{graphqllimit.Field("Query.report", limiter.Limit{Uses: 4, Window: time.Minute})}}, "Fields[0].Limit.uses"},
	} {
		_, err := graphqllimit.New(mem, es, c.opts)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("New(%+v) = %v, want an InputError naming %s", c.opts, err, c.field)
		}
	}
	if _, err := graphqllimit.New(nil, es, graphqllimit.Options{}); err == nil {
		t.Error("New with a nil store: no error")
	}
	// The schema's own directives are read and checked: a directive with a
	// bad limit is refused, naming it.
	_, err := graphqllimit.New(mem, es, graphqllimit.Options{Bounds: limiter.Bounds{MaxLogUses: 2}})
	var ie *limiter.InputError
	if !errors.As(err, &ie) || ie.Field != "schema Item.price @rateLimit(limit).uses" {
		t.Errorf("New with MaxLogUses 2 under Item.price's 3/1m = %v, want an InputError naming the directive", err)
	}
}

// With SplitRefused, a refused batch is counted again field by field: only
// the field over its limit is refused, the others run and are counted.
func TestSplitRefused(t *testing.T) {
	s := newServer(t, graphqllimit.Options{TrustedProxies: trusted, SplitRefused: true}, true)
	if r := s.do("203.0.113.1", `{ report }`, nil); len(r.Errors) != 0 {
		t.Fatalf("report 1: %+v", r)
	}
	s.store.reset()
	r := s.do("203.0.113.1", `{ report items { price } }`, nil)
	e := onlyError(t, "report 2 with items", r)
	if e.Extensions["code"] != graphqllimit.CodeRateLimited || e.Path[0] != "report" || e.Extensions["retryAfter"] != float64(3600) {
		t.Fatalf("report 2: %+v, want report refused, with its own wait of 3600 s", e)
	}
	items, _ := r.Data["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["price"] != float64(3) {
		t.Fatalf("report 2: data %v, want items with their price resolved", r.Data)
	}
	if calls := s.store.reset(); len(calls) != 3 {
		t.Fatalf("store calls %v, want 3: the batch, then report and price alone", calls)
	}
	// price was counted: 2 of its 3/1m are left after this one.
	for i := range 2 {
		if r := s.do("203.0.113.1", `{ items { price } }`, nil); len(r.Errors) != 0 {
			t.Fatalf("price %d: %+v", i+2, r)
		}
	}
	if r := s.do("203.0.113.1", `{ items { price } }`, nil); len(r.Errors) != 1 {
		t.Fatalf("price 4: %+v, want refused (the split counted the 1st)", r)
	}
}
