package ringlimit_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/rls"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

const (
	limiterService = "ringlimit.v1.Limiter"
	rlsService     = "envoy.service.ratelimit.v3.RateLimitService"
)

func envoyConfig(t *testing.T) *rls.Config {
	t.Helper()
	cfg, err := rls.Load("rls/testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// reflect sends one reflection request on a fresh stream (grpcurl opens
// one the same way) and returns the answer.
func reflect(ctx context.Context, t *testing.T, c reflectionpb.ServerReflectionClient, req *reflectionpb.ServerReflectionRequest) (*reflectionpb.ServerReflectionResponse, error) {
	t.Helper()
	st, err := c.ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	defer st.CloseSend()
	// A Send that fails with io.EOF means the server ended the stream
	// (Unimplemented, say): Recv returns its status.
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return st.Recv()
}

// Server reflection, with grpc-go's reflection client (what grpcurl
// speaks): the services are listed, and the descriptor of
// ringlimit.v1.Limiter comes back with its methods, so a tool needs no
// .proto. NoGRPCReflection turns it off.
func TestGRPCReflection(t *testing.T) {
	tc := startCluster(t, 1, func(c *ringlimit.Config) { c.Envoy = envoyConfig(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := reflectionpb.NewServerReflectionClient(dialPlain(t, tc.nodes[0].GRPCAddr()))
	resp, err := reflect(ctx, t, client, &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"}})
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{limiterService, "ringlimit.v1.Peer", rlsService, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v: %s missing", names, want)
		}
	}
	resp, err = reflect(ctx, t, client, &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: limiterService}})
	if err != nil {
		t.Fatalf("file containing %s: %v", limiterService, err)
	}
	var methods []string
	for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &fd); err != nil {
			t.Fatal(err)
		}
		for _, s := range fd.GetService() {
			if fd.GetPackage()+"."+s.GetName() == limiterService {
				for _, m := range s.GetMethod() {
					methods = append(methods, m.GetName())
				}
			}
		}
	}
	for _, want := range []string{"Consume", "Peek", "Multi", "Owner"} {
		if !slices.Contains(methods, want) {
			t.Errorf("the reflected %s has methods %v: %s missing", limiterService, methods, want)
		}
	}

	off := startCluster(t, 1, func(c *ringlimit.Config) { c.NoGRPCReflection = true })
	_, err = reflect(ctx, t, reflectionpb.NewServerReflectionClient(dialPlain(t, off.nodes[0].GRPCAddr())),
		&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"}})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection with NoGRPCReflection: %v, want Unimplemented", err)
	}
}

// gRPC health answers for the services by name, not only for "": SERVING
// while the node is ready, NOT_SERVING while it joins and from the start
// of its shutdown, as "" does. The Envoy service has a status only where
// it is served.
func TestGRPCHealthByService(t *testing.T) {
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.Envoy = envoyConfig(t) })
	plain := startCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	health := healthpb.NewHealthClient(dialPlain(t, tc.nodes[0].GRPCAddr()))
	names := []string{"", limiterService, "ringlimit.v1.Peer", rlsService}
	for _, name := range names {
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q on a ready node: %v %v, want SERVING", name, r.GetStatus(), err)
		}
	}
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Errorf("health of an unknown service: %v, want NotFound", err)
	}
	if _, err := healthpb.NewHealthClient(dialPlain(t, plain.nodes[0].GRPCAddr())).Check(ctx, &healthpb.HealthCheckRequest{Service: rlsService}); status.Code(err) != codes.NotFound {
		t.Errorf("health of %s on a node without Envoy rules: %v, want NotFound", rlsService, err)
	}

	// Shutting down: every name turns NOT_SERVING before the servers stop.
	n := tc.nodes[1]
	watches := make([]healthpb.Health_WatchClient, len(names))
	for i, name := range names {
		w, err := healthpb.NewHealthClient(dialPlain(t, n.GRPCAddr())).Watch(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("watch %q: %v %v, want SERVING first", name, r.GetStatus(), err)
		}
		watches[i] = w
	}
	closed := make(chan error, 1)
	go func() { closed <- n.Close(ctx) }()
	for i, w := range watches {
		if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("watch %q during shutdown: %v %v, want NOT_SERVING", names[i], r.GetStatus(), err)
		}
	}
	if err := <-closed; err != nil {
		t.Errorf("close: %v", err)
	}

	// Joining: NOT_SERVING for every name until the node is ready.
	seed, err := net.Listen("tcp", "127.0.0.1:0") // a seed that never answers gossip
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	cfg := nodeConfig("joining")
	cfg.Join, cfg.JoinTimeout, cfg.Envoy = []string{seed.Addr().String()}, 20*time.Second, envoyConfig(t)
	late, err := ringlimit.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		late.Close(ctx)
	})
	lh := healthpb.NewHealthClient(dialPlain(t, late.GRPCAddr()))
	for _, name := range names {
		r, err := lh.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health of %q on a joining node: %v %v, want NOT_SERVING", name, r.GetStatus(), err)
		}
	}
}

// A window_ms past the largest is refused naming the value sent; before,
// it was reported as "got -1ns".
func TestGRPCWindowTooLarge(t *testing.T) {
	tc := startCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := pb.NewLimiterClient(dialPlain(t, tc.nodes[0].GRPCAddr()))
	req := func(ms int64) []*pb.Entry {
		return []*pb.Entry{{Key: []byte("w"), Limit: &pb.Limit{Uses: 5, WindowMs: ms}}}
	}
	for _, c := range []struct {
		ms   int64
		sent string
	}{
		{9223372036855, "got 9223372036855ms"},
		{math.MaxInt64, "got 9223372036854775807ms"},
		{math.MinInt64, "got -9223372036854775808ms"},
		{-5, "got -5ms"},
		{0, "got 0s"},
	} {
		_, err := client.Consume(ctx, &pb.ConsumeRequest{Entries: req(c.ms)})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "entries[0].limit.window") || !strings.Contains(err.Error(), c.sent) || strings.Contains(err.Error(), "-1ns") {
			t.Errorf("Consume with window_ms %d: %v, want InvalidArgument naming entries[0].limit.window, %q", c.ms, err, c.sent)
		}
		// The same through Multi, where each call answers its own error.
		resp, err := client.Multi(ctx, &pb.MultiRequest{Calls: []*pb.Call{{Entries: req(c.ms)}, {Entries: req(1000)}}})
		if err != nil {
			t.Fatal(err)
		}
		e := resp.GetResults()[0].GetError()
		if codes.Code(e.GetCode()) != codes.InvalidArgument || e.GetField() != "entries[0].limit.window" || !strings.Contains(e.GetMessage(), c.sent) {
			t.Errorf("Multi with window_ms %d: %v, want InvalidArgument naming entries[0].limit.window, %q", c.ms, e, c.sent)
		}
		if r := resp.GetResults()[1]; r.GetError() != nil || !r.GetVerdict().GetAllowed() {
			t.Errorf("Multi's good call beside window_ms %d: %v", c.ms, r)
		}
	}
	// The largest window itself is served.
	if _, err := client.Consume(ctx, &pb.ConsumeRequest{Entries: req(9223372036854)}); err != nil {
		t.Errorf("Consume with the largest window_ms: %v", err)
	}
}

// Owner refuses an empty key, as the CLI (Client.Owner) does, and a key
// past the key bound; before, it named an owner for "".
func TestGRPCOwnerRefusesBadKeys(t *testing.T) {
	tc := startCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := pb.NewLimiterClient(dialPlain(t, tc.nodes[0].GRPCAddr()))
	if r, err := client.Owner(ctx, &pb.OwnerRequest{}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "key") {
		t.Errorf("Owner of an empty key: %v %v, want InvalidArgument naming key", r, err)
	}
	if _, err := client.Owner(ctx, &pb.OwnerRequest{Key: make([]byte, 1025)}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Owner of a 1025-byte key: %v, want ResourceExhausted", err)
	}
	if r, err := client.Owner(ctx, &pb.OwnerRequest{Key: []byte("k")}); err != nil || r.GetOwner().GetName() != tc.nodes[0].Name() {
		t.Errorf("Owner of k: %v %v", r, err)
	}
	// The embedded API and the fleet client (the CLI's) agree.
	if _, err := tc.nodes[0].Owner(""); err == nil {
		t.Error("Node.Owner(\"\") named an owner")
	}
	cl := dialCluster(t, tc, nil)
	if _, err := cl.Owner(ctx, ""); err == nil {
		t.Error("Client.Owner(\"\") named an owner")
	}
}
