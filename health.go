package ringlimit

import (
	"context"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ringlimit/ringlimit/rpc"
)

// healthServer is the standard gRPC health service whose Watch streams end
// when the node stops its servers. grpc's own never end by themselves, so
// a single open watch (any client with health checking on) held
// GracefulStop, and Close, until Close's deadline.
type healthServer struct {
	*health.Server
	ctx context.Context // done when the node's long-lived streams end
}

func newHealthServer(s *health.Server, st *streams) *healthServer {
	return &healthServer{Server: s, ctx: st.ctx}
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

// notReadyError is ErrNotReady. It matches rpc.ErrUnavailable, so a call
// made before the node joined gets gRPC Unavailable (which clients retry)
// and HTTP 503, not Internal.
type notReadyError struct{}

func (notReadyError) Error() string { return "ringlimit: node has not joined its cluster yet" }

func (notReadyError) Is(target error) bool { return target == rpc.ErrUnavailable }
