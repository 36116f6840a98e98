package extproc

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Health is a gRPC health service that answers the same status for every service name
// ("", "envoy.service.ext_proc.v3.ExternalProcessor", "inference-extension", "liveness",
// "readiness", ...): NOT_SERVING until SetServing(true). Safe for concurrent use.
type Health struct {
	healthpb.UnimplementedHealthServer

	mu      sync.Mutex
	serving bool
	changed chan struct{} // closed and replaced on every change
}

// NewHealth returns a Health that is NOT_SERVING.
func NewHealth() *Health { return &Health{changed: make(chan struct{})} }

// SetServing sets the status every service name reports.
func (h *Health) SetServing(serving bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.serving == serving {
		return
	}
	h.serving = serving
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *Health) current() (healthpb.HealthCheckResponse_ServingStatus, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.serving {
		return healthpb.HealthCheckResponse_SERVING, h.changed
	}
	return healthpb.HealthCheckResponse_NOT_SERVING, h.changed
}

// Check implements grpc.health.v1.Health.
func (h *Health) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, _ := h.current()
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List implements grpc.health.v1.Health: the names this server is known by.
func (h *Health) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	st, _ := h.current()
	out := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
	for _, n := range []string{"", "envoy.service.ext_proc.v3.ExternalProcessor", "inference-extension", "liveness", "readiness"} {
		out.Statuses[n] = &healthpb.HealthCheckResponse{Status: st}
	}
	return out, nil
}

// Watch implements grpc.health.v1.Health: the current status, then every change.
func (h *Health) Watch(_ *healthpb.HealthCheckRequest, s healthpb.Health_WatchServer) error {
	for {
		st, changed := h.current()
		if err := s.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return status.FromContextError(s.Context().Err()).Err()
		}
	}
}

var _ healthpb.HealthServer = (*Health)(nil)

// errUnknownMessage is the gRPC error for a ProcessingRequest with no request set.
var errUnknownMessage = status.Error(codes.InvalidArgument, "ext_proc: ProcessingRequest carries no request (expected headers, body or trailers)")
