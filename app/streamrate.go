package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
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

// streamRate is what the ext_proc connections' stream rates share: the rate, the metrics,
// the rate-limited log, and the open connections by remote address (where Tap finds a
// stream's connection).
type streamRate struct {
	rate, burst float64
	refused     prometheus.Counter
	waited      prometheus.Counter
	log         *slog.Logger
	logs        *ratelog.Limiter

	mu    sync.Mutex
	conns map[string]*streamConn
}

func newStreamRate(rate, burst int64, log *slog.Logger, reg prometheus.Registerer) (*streamRate, error) {
	r := &streamRate{rate: float64(rate), burst: float64(burst), log: log, logs: ratelog.New(10 * time.Second), conns: map[string]*streamConn{},
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

// streamListener gives every accepted connection a bucket of streams.
type streamListener struct {
	net.Listener
	r *streamRate
}

func (l *streamListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &streamConn{Conn: c, r: l.r, key: c.RemoteAddr().String(), bucket: newStreamBucket(l.r.rate, l.r.burst, time.Now()), closed: make(chan struct{})}
	l.r.mu.Lock()
	l.r.conns[sc.key] = sc
	l.r.mu.Unlock()
	return sc, nil
}

// streamConn is an ext_proc connection and its bucket of streams.
type streamConn struct {
	net.Conn
	r   *streamRate
	key string // RemoteAddr().String(), its key in r.conns

	mu      sync.Mutex
	bucket  streamBucket
	closed  chan struct{}
	closing sync.Once
}

// Read waits, after a refused stream, until the connection could open one again.
func (c *streamConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	wait := c.bucket.wait(time.Now())
	c.mu.Unlock()
	if wait > 0 {
		c.r.waited.Add(wait.Seconds())
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.closed:
			t.Stop()
		}
	}
	return c.Conn.Read(p)
}

func (c *streamConn) Close() error {
	c.closing.Do(func() {
		close(c.closed)
		c.r.mu.Lock()
		if c.r.conns[c.key] == c {
			delete(c.r.conns, c.key)
		}
		c.r.mu.Unlock()
	})
	return c.Conn.Close()
}

// tap returns a grpc.InTapHandle that refuses an ext_proc stream over its connection's
// rate (gRPC RESOURCE_EXHAUSTED, counted and logged at most once per 10 s) and passes the
// others, and streams of other methods, to next. It runs in the transport as the stream's
// headers arrive, before the stream has a goroutine or reads a message.
func (r *streamRate) tap(next tap.ServerInHandle) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if info.FullMethodName == extprocv3.ExternalProcessor_Process_FullMethodName {
			if c := r.conn(ctx); c != nil {
				c.mu.Lock()
				ok := c.bucket.admit(time.Now())
				c.mu.Unlock()
				if !ok {
					return nil, r.refuse(c)
				}
			}
		}
		return next(ctx, info)
	}
}

// conn is the open connection a stream's context came on, or nil.
func (r *streamRate) conn(ctx context.Context) *streamConn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil
	}
	key := p.Addr.String()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[key]
}

// refusal is the status of every refused stream: one value, built once.
var refusal = status.Error(codes.ResourceExhausted, fmt.Sprintf(
	"this connection opens ext_proc streams faster than --grpc-conn-stream-rate (default %d/s, burst --grpc-conn-stream-burst): retry shortly; if it is Envoy carrying real traffic, raise the rate", DefaultConnStreamRate))

// refuse counts a refused stream of c and logs at most once every 10 s.
func (r *streamRate) refuse(c *streamConn) error {
	r.refused.Inc()
	if n, logIt := r.logs.Due("", time.Now()); logIt {
		r.log.Warn("ext_proc streams refused: a connection opens them faster than --grpc-conn-stream-rate (logged once per 10 s; see loadaware_extproc_stream_rate_refused_total). If it is Envoy carrying real traffic, raise the rate",
			"peer", c.key, "refused", n, "rate_per_s", int64(r.rate), "burst", int64(r.burst))
	}
	return refusal
}
