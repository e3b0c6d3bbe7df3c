package ringlimit

import (
	"context"
	"sort"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ringlimit/ringlimit/rpc"
)

// healthServer is the standard gRPC health service whose Watch streams end
// when the node stops its servers. grpc's own never end by themselves, so
// a single open watch (any client with health checking on) held
// GracefulStop, and Close, until Close's deadline.
//
// It answers for the whole node (service "") and for each service the
// node serves by name (ringlimit.v1.Limiter, ringlimit.v1.Peer and, with
// Envoy's rules, envoy.service.ratelimit.v3.RateLimitService): clients
// that health-check the service they call (grpc-go's healthCheckConfig,
// Envoy's gRPC health checker) ask by its name, and got NotFound.
type healthServer struct {
	*health.Server
	ctx   context.Context // done when the node's long-lived streams end
	names []string        // "" and the services answered for
}

// newHealthServer answers for "" and every service registered on srv so
// far, all NOT_SERVING until set says otherwise.
func newHealthServer(s *health.Server, st *streams, srv *grpc.Server) *healthServer {
	h := &healthServer{Server: s, ctx: st.ctx, names: []string{""}}
	for name := range srv.GetServiceInfo() {
		h.names = append(h.names, name)
	}
	sort.Strings(h.names[1:])
	h.set(healthpb.HealthCheckResponse_NOT_SERVING)
	return h
}

// set gives every name the node answers for one status: the node is
// ready, or not, as a whole.
func (h *healthServer) set(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, name := range h.names {
		h.SetServingStatus(name, st)
	}
}

// Watch is health.Server's Watch, ended too when the node's streams end.
func (h *healthServer) Watch(in *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stop := context.AfterFunc(h.ctx, cancel)
	defer stop()
	return h.Server.Watch(in, watchStream{stream, ctx})
}

type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }

// notReadyError is ErrNotReady. It matches rpc.ErrUnavailable, so where it
// travels as an error (WaitReady's, or a policy's Failure written by the
// JSON API) it is gRPC Unavailable and HTTP 503, not Internal.
type notReadyError struct{}

func (notReadyError) Error() string { return "ringlimit: node has not joined its cluster yet" }

func (notReadyError) Is(target error) bool { return target == rpc.ErrUnavailable }
