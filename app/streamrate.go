package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/ratelog"
	"github.com/loadaware/loadaware-epp/tokenbucket"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Defaults of the ext_proc per-connection stream rate (decision 1185): one core's worth of
// decisions a second (BenchmarkRoundTrip: 258-324 us of CPU a request, both ends, on the
// loaded 2-core host; the picker's end alone is under that), with one second of them at
// once. An Envoy worker thread holds one connection and one worker proxies at most a
// core's worth of requests, so no connection Envoy opens goes past it; a client opening
// stream after stream on one connection gets one core, not every core.
const (
	DefaultConnStreamRate  = 4000 // ext_proc streams per second, per connection
	DefaultConnStreamBurst = 4000 // streams
)

// streamBucket is the pure arithmetic of one connection's stream rate: a token a stream,
// refused when none is left. After a refusal the connection is read again only once the
// bucket holds a token, so a client retrying refused streams at once is slowed to the
// rate instead of costing a refusal each (wait). Callers hold their own lock.
type streamBucket struct {
	b       tokenbucket.Bucket
	refused bool // a stream was refused since the connection last waited
}

func newStreamBucket(rate, burst float64, now time.Time) streamBucket {
	return streamBucket{b: tokenbucket.New(rate, burst, now)}
}

// admit takes a token for a new stream at now and reports whether there was one.
func (s *streamBucket) admit(now time.Time) bool {
	s.b.Refill(now)
	if s.b.Tokens() < 1 {
		s.refused = true
		return false
	}
	s.b.Take(1)
	return true
}

// wait is how long the connection's next read waits at now: until the bucket holds a
// token again if a stream was refused since the last wait, else 0. It clears the refusal.
func (s *streamBucket) wait(now time.Time) time.Duration {
	if !s.refused {
		return 0
	}
	s.refused = false
	s.b.Refill(now)
	return s.b.Until(1)
}

// streamRate is the stream-rate policy the ext_proc connections share: the rate, the
// metrics, the rate-limited log, and the registry of open connections (where tap finds a
// stream's connection). Each connection's streamBucket is in its extConn.
type streamRate struct {
	rate, burst float64
	refused     prometheus.Counter
	waited      prometheus.Counter
	log         *slog.Logger
	logs        *ratelog.Limiter
	conns       *extConns
}

// newStreamRate admits rate streams a second and burst at once on each connection,
// finding connections in conns.
func newStreamRate(rate, burst int64, conns *extConns, log *slog.Logger, reg prometheus.Registerer) (*streamRate, error) {
	r := &streamRate{rate: float64(rate), burst: float64(burst), log: log, logs: ratelog.New(10 * time.Second), conns: conns,
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_extproc_stream_rate_refused_total",
			Help: "ext_proc streams refused with RESOURCE_EXHAUSTED because their connection opened streams faster than --grpc-conn-stream-rate (decision 1185).",
		}),
		waited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_extproc_stream_rate_wait_seconds_total",
			Help: "Time ext_proc connections were not read after a stream of theirs was refused over --grpc-conn-stream-rate, until it would be admitted.",
		}),
	}
	for _, c := range []prometheus.Collector{r.refused, r.waited} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// tap returns a grpc.InTapHandle that refuses an ext_proc stream over its connection's
// rate (gRPC RESOURCE_EXHAUSTED, counted and logged at most once per 10 s) and passes the
// others, and streams of other methods, to next. It runs in the transport as the stream's
// headers arrive, before the stream has a goroutine or reads a message.
func (r *streamRate) tap(next tap.ServerInHandle) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if info.FullMethodName == extprocv3.ExternalProcessor_Process_FullMethodName {
			if p, ok := peer.FromContext(ctx); ok {
				if c := r.conns.byAddr(p.Addr); c != nil && !c.admit() {
					return nil, r.refuse(c)
				}
			}
		}
		return next(ctx, info)
	}
}

// refusal is the status of every refused stream: one value, built once.
var refusal = status.Error(codes.ResourceExhausted, fmt.Sprintf(
	"this connection opens ext_proc streams faster than --grpc-conn-stream-rate (default %d/s, burst --grpc-conn-stream-burst): retry shortly; if it is Envoy carrying real traffic, raise the rate", DefaultConnStreamRate))

// refuse counts a refused stream of c and logs at most once every 10 s.
func (r *streamRate) refuse(c *extConn) error {
	r.refused.Inc()
	if n, logIt := r.logs.Due("", time.Now()); logIt {
		r.log.Warn("ext_proc streams refused: a connection opens them faster than --grpc-conn-stream-rate (logged once per 10 s; see loadaware_extproc_stream_rate_refused_total). If it is Envoy carrying real traffic, raise the rate",
			"peer", c.peer, "refused", n, "rate_per_s", int64(r.rate), "burst", int64(r.burst))
	}
	return refusal
}
