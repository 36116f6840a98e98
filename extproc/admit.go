package extproc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// TransportSlack is how many ext_proc streams past Limits.MaxStreams the transport admits,
// to be answered 503 at their headers (a readable refusal); Admit refuses any more before
// reading them.
const TransportSlack = 64

// processMethod is the full gRPC method name of the ext_proc stream.
const processMethod = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"

// admittedKey marks the context of a stream Admit counted.
type admittedKey struct{}

// Admit is the ext_proc server's grpc.InTapHandle (grpc.InTapHandle(s.Admit)): it runs in
// the transport when a stream's headers arrive, before any of its messages is read, and
// refuses the stream (gRPC ResourceExhausted, counted in
// loadaware_extproc_overload_total{reason="transport-streams"}) when Limits.MaxStreams +
// TransportSlack ext_proc streams are open. Every open stream can make the transport hold
// its flow-control window and one short message being received (a long one is counted by
// TakeBuffered); this bounds how many there are, whatever the number of connections
// (decisions 1131, 1180). Streams of other methods pass.
func (s *Server) Admit(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != processMethod {
		return ctx, nil
	}
	if s.admitted.Add(1) > s.maxAdmitted {
		s.admitted.Add(-1)
		s.metrics.overload.WithLabelValues("transport-streams").Inc()
		return nil, status.Error(codes.ResourceExhausted, fmt.Sprintf(
			"the picker holds %d ext_proc streams (--max-streams %d and %d more to be answered 503): retry shortly", s.maxAdmitted, s.cfg.Limits.MaxStreams, TransportSlack))
	}
	return context.WithValue(ctx, admittedKey{}, true), nil
}

// leaveAdmitted gives back the place Admit counted for the stream of ctx, if it did.
func (s *Server) leaveAdmitted(ctx context.Context) {
	if ctx.Value(admittedKey{}) != nil {
		s.admitted.Add(-1)
	}
}

// TakeBuffered reserves n bytes of the buffered-bytes budget (--max-buffered-bytes) for a
// message the transport is receiving, before grpc-go opens the stream's window to it; it
// reports false when the budget cannot take them. GiveBuffered returns them. Together
// with the bodies held, what they reserve stays within the budget (decision 1180).
func (s *Server) TakeBuffered(n int64) bool { return s.bytes.take(n) }

// GiveBuffered returns what TakeBuffered reserved.
func (s *Server) GiveBuffered(n int64) { s.bytes.give(n) }

// TransportRefused counts a message refused at the transport because the budget could not
// take it: its stream ends with gRPC RESOURCE_EXHAUSTED (reason "transport-bytes"), or, when
// closed, its connection was closed (reason "transport-bytes-conn"). It logs like the other
// refusals, at most once per reason every 10 s.
func (s *Server) TransportRefused(closed bool) {
	reason, what := "transport-bytes", "its stream ended with RESOURCE_EXHAUSTED"
	if closed {
		reason, what = "transport-bytes-conn", "its length came split across reads and the overdraft was in use, so its connection was closed"
	}
	s.metrics.overload.WithLabelValues(reason).Inc()
	if n, ok := s.overloadLog.Due(reason, time.Now()); ok {
		s.cfg.Logger.Warn("ext_proc messages refused as they arrived: --max-buffered-bytes could not take them (logged once per 10 s per limit; see loadaware_extproc_overload_total)",
			"limit", reason, "refused", n, "last_reason", what)
	}
}
