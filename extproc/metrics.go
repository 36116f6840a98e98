package extproc

import (
	"sync/atomic"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	streamErrors *prometheus.CounterVec
	immediate    *prometheus.CounterVec
	bodyless     modeCounters
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
		bodyless: modeCounters{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_extproc_unread_bodies_total",
			Help: "Requests routed at the headers because Envoy's request_body_mode sends no body the picker can read (use FULL_DUPLEX_STREAMED or BUFFERED).",
		}, []string{"mode"})},
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
		for _, c := range []prometheus.Collector{m.streamErrors, m.immediate, m.bodyless.vec, m.released, m.overload, m.explain} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// modeCounters is a CounterVec by Envoy body mode whose series are each looked up once, on
// first use (a series appears when first counted, as with WithLabelValues): a STREAMED or
// NONE request counts one, and WithLabelValues hashes its label and takes the vector's lock
// every time.
type modeCounters struct {
	vec    *prometheus.CounterVec
	series [8]atomic.Value // prometheus.Counter, by mode; modes past the array are looked up each time
}

// inc adds 1 to mode m's series.
func (c *modeCounters) inc(m filterv3.ProcessingMode_BodySendMode) {
	if m < 0 || int(m) >= len(c.series) {
		c.vec.WithLabelValues(m.String()).Inc()
		return
	}
	s, _ := c.series[m].Load().(prometheus.Counter)
	if s == nil {
		s = c.vec.WithLabelValues(m.String())
		c.series[m].Store(s)
	}
	s.Inc()
}
