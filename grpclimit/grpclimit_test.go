package grpclimit_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var discard = slog.New(slog.DiscardHandler)

// keyStore is a real Memory that remembers the keys asked about.
type keyStore struct {
	*limiter.Memory
	mu   sync.Mutex
	keys []string
	fail error
}

func (s *keyStore) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	s.mu.Lock()
	s.keys = append(s.keys, entries[0].Key)
	err := s.fail
	s.mu.Unlock()
	if err != nil {
		return limiter.Verdict{}, err
	}
	return s.Memory.ConsumeMany(ctx, entries)
}

func (s *keyStore) lastKey() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) == 0 {
		return ""
	}
	k := s.keys[len(s.keys)-1]
	s.keys = nil
	return k
}

// start runs the standard health service behind the interceptors on
// 127.0.0.1 and returns a client.
func start(t *testing.T, store limiter.Store, opts grpclimit.Options) healthpb.HealthClient {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard
	}
	lim, err := grpclimit.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	return serveWith(t, lim)
}

// serveWith runs the standard health service behind lim.
func serveWith(t *testing.T, lim *grpclimit.Interceptors) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.Unary()), grpc.StreamInterceptor(lim.Stream()))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hs.Shutdown()
		srv.Stop()
		<-done
	})
	return healthpb.NewHealthClient(conn)
}

func newStore(t *testing.T, clock limiter.Clock) *keyStore {
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return &keyStore{Memory: m}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

var (
	minute  = limiter.Limit{Uses: 3, Window: time.Minute}
	check   = healthpb.Health_Check_FullMethodName
	list    = healthpb.Health_List_FullMethodName
	service = "/grpc.health.v1.Health/*"
)

func TestPerMethodRulesAndRefusal(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := limiter.NewFakeClock(t0)
	store := newStore(t, clock)
	c := start(t, store, grpclimit.Options{
		Limit: minute,
		Methods: []grpclimit.Rule{
			grpclimit.Method(check, limiter.Limit{Uses: 2, Window: 90 * time.Second}),
			grpclimit.Exempt(list),
		},
		Clock: clock,
	})
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		var hdr metadata.MD
		_, err := c.Check(ctx(t), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		if status.Code(err) != want {
			t.Fatalf("Check %d: %v, want %v", i, err, want)
		}
		if k := store.lastKey(); k != "grpc:"+check+":127.0.0.1" {
			t.Errorf("Check %d: key %q", i, k)
		}
		if want == codes.OK {
			if got := strings.Join([]string{hdr.Get("ratelimit-limit")[0], hdr.Get("ratelimit-remaining")[0], hdr.Get("ratelimit-reset")[0]}, " "); got != "2 "+[]string{"1", "0"}[i]+" 90" {
				t.Errorf("Check %d: headers %q", i, got)
			}
			continue
		}
		st := status.Convert(err)
		if st.Message() != "rate limit exceeded" || len(st.Details()) != 1 {
			t.Fatalf("refusal %v with details %v", st, st.Details())
		}
		ri, ok := st.Details()[0].(*errdetails.RetryInfo)
		if !ok || ri.RetryDelay.AsDuration() != 90*time.Second {
			t.Errorf("detail %v; want RetryInfo of 90s", st.Details()[0])
		}
	}
	// Exempt: never counted.
	for i := 0; i < 5; i++ {
		if _, err := c.List(ctx(t), &healthpb.HealthListRequest{}); err != nil {
			t.Fatalf("List %d: %v", i, err)
		}
	}
	if k := store.lastKey(); k != "" {
		t.Errorf("exempt List counted as %q", k)
	}
	// The refused Check used no quota: 90 s after the first, it passes.
	clock.Advance(90 * time.Second)
	if _, err := c.Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("Check after the window: %v", err)
	}
}

// Watch (a server stream) counts once when it opens, in the global counter.
func TestStream(t *testing.T) {
	store := newStore(t, nil)
	c := start(t, store, grpclimit.Options{Limit: limiter.Limit{Uses: 1, Window: time.Minute}})
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		sctx, cancel := context.WithCancel(ctx(t))
		s, err := c.Watch(sctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		cancel()
		if status.Code(err) != want {
			t.Fatalf("Watch %d: %v, want %v", i, err, want)
		}
		if k := store.lastKey(); k != "grpc:*:127.0.0.1" {
			t.Errorf("Watch %d: key %q", i, k)
		}
		if want == codes.ResourceExhausted {
			if d := status.Convert(err).Details(); len(d) != 1 {
				t.Errorf("details %v", d)
			}
		}
	}
}

// Keys from metadata, a service rule, and the missing-key policies.
func TestMetadataKeyAndMissing(t *testing.T) {
	for _, c := range []struct {
		policy httplimit.MissingKey
		codes  []codes.Code
	}{
		{httplimit.MissingDeny, []codes.Code{codes.PermissionDenied, codes.PermissionDenied}},
		{httplimit.MissingAllow, []codes.Code{codes.OK, codes.OK}},
		{httplimit.MissingShared, []codes.Code{codes.OK, codes.ResourceExhausted}},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			store := newStore(t, nil)
			cl := start(t, store, grpclimit.Options{
				Limit:        minute,
				Methods:      []grpclimit.Rule{grpclimit.Method(service, limiter.Limit{Uses: 1, Window: time.Minute})},
				MetadataKey:  "X-API-Key",
				OnMissingKey: c.policy,
			})
			with := metadata.AppendToOutgoingContext(ctx(t), "x-api-key", "k-1")
			if _, err := cl.Check(with, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			if k := store.lastKey(); k != "grpc:"+service+":k-1" {
				t.Errorf("key %q", k)
			}
			for i, want := range c.codes {
				if _, err := cl.Check(ctx(t), &healthpb.HealthCheckRequest{}); status.Code(err) != want {
					t.Errorf("keyless call %d: %v, want %v", i, err, want)
				}
			}
		})
	}
}

func TestStoreFailure(t *testing.T) {
	for _, p := range []fallback.Policy{fallback.Deny, fallback.Allow} {
		store := newStore(t, nil)
		store.fail = errors.New("connection refused")
		c := start(t, store, grpclimit.Options{Limit: minute, OnStoreError: p})
		_, err := c.Check(ctx(t), &healthpb.HealthCheckRequest{})
		want := codes.OK
		if p == fallback.Deny {
			want = codes.Unavailable
		}
		if status.Code(err) != want {
			t.Errorf("%v: %v, want %v", p, err, want)
		}
		if p == fallback.Deny && !strings.HasPrefix(status.Convert(err).Message(), "rate limit store unavailable (correlation id ") {
			t.Errorf("message %q", status.Convert(err).Message())
		}
	}
}

func TestOptionsValidated(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer m.Close()
	for _, c := range []struct {
		store limiter.Store
		opts  grpclimit.Options
		field string
	}{
		{nil, grpclimit.Options{Limit: minute}, "store"},
		{m, grpclimit.Options{}, "Limit.uses"},
		{m, grpclimit.Options{Limit: limiter.Limit{Uses: 1, Window: time.Microsecond}}, "Limit.window"},
		{m, grpclimit.Options{Limit: minute, IPv6Prefix: 200}, "IPv6Prefix"},
		{m, grpclimit.Options{Limit: minute, OnStoreError: fallback.Local}, "OnStoreError"},
		{m, grpclimit.Options{Limit: minute, OnMissingKey: 7}, "OnMissingKey"},
		{m, grpclimit.Options{Limit: minute, MetadataKey: "k", Key: func(context.Context, string) string { return "" }}, "MetadataKey"},
		{m, grpclimit.Options{Limit: minute, Methods: []grpclimit.Rule{grpclimit.Method("Check", minute)}}, "Methods[0].Method"},
		{m, grpclimit.Options{Limit: minute, Methods: []grpclimit.Rule{grpclimit.Method("/svc/a*", minute)}}, "Methods[0].Method"},
		{m, grpclimit.Options{Limit: minute, Methods: []grpclimit.Rule{{Method: check}}}, "Methods[0].Limit.uses"},
		{m, grpclimit.Options{Limit: minute, Methods: []grpclimit.Rule{grpclimit.Exempt(check), grpclimit.Exempt(check)}}, "Methods[1].Method"},
	} {
		_, err := grpclimit.New(c.store, c.opts)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("New(%+v) = %v; want an InputError on %s", c.opts, err, c.field)
		}
	}
}
