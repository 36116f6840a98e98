package extproc

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	streamErrors *prometheus.CounterVec
	immediate    *prometheus.CounterVec
	bodyless     *prometheus.CounterVec
	released     prometheus.Counter
	overload     *prometheus.CounterVec
	explain      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		streamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_extproc_stream_errors_total",
			Help: "ext_proc streams that ended abnormally, by kind (canceled: client or Envoy went away; recv/send: transport; protocol: unexpected message order).",
		}, []string{"kind"}),
		immediate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_extproc_immediate_responses_total",
			Help: "Requests answered by the picker itself (ImmediateResponse), by HTTP status.",
		}, []string{"code"}),
		bodyless: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_extproc_unread_bodies_total",
			Help: "Requests routed at the headers because Envoy's request_body_mode sends no body the picker can read (use FULL_DUPLEX_STREAMED or BUFFERED).",
		}, []string{"mode"}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_extproc_bookings_released_total",
			Help: "Bookings released by the ext_proc server (response end, trailers, error or stream end).",
		}),
		overload: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_extproc_overload_total",
			Help: "Requests refused at a resource limit, by reason (streams: --max-streams; transport-streams: refused before reading, --max-streams plus 64 open; buffered-bytes: --max-buffered-bytes; transport-bytes: a message over 64 KiB the same budget could not take as it arrived, its stream ended with gRPC RESOURCE_EXHAUSTED; transport-bytes-conn: the same with its length split across reads and the overdraft in use, the connection closed; idle-timeout: --stream-idle-timeout).",
		}, []string{"reason"}),
		explain: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_extproc_explain_requests_total",
			Help: "Requests that asked for the decision header, by outcome (given; refused: --explain and the admin token did not allow it).",
		}, []string{"outcome"}),
	}
	for _, r := range []string{"streams", "transport-streams", "buffered-bytes", "transport-bytes", "transport-bytes-conn", "idle-timeout"} {
		m.overload.WithLabelValues(r) // every limit's series from the start, for dashboards
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.streamErrors, m.immediate, m.bodyless, m.released, m.overload, m.explain} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
