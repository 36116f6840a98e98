package app

import (
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the ext_proc per-connection read rate (decision 0707). One Envoy worker
// thread holds one connection and carries its share of every request body (and, in
// FULL_DUPLEX_STREAMED response mode, every response body): even 1,000 requests/s of
// 100 KB bodies over four workers is 25 MB/s a connection. The burst lets four
// --max-body-bytes bodies (16 MiB) through at once.
const (
	DefaultConnReadRate  = 32 << 20 // bytes per second, per ext_proc connection
	DefaultConnReadBurst = 32 << 20 // bytes
)

// connRate is what the ext_proc connections share: the rate, the metrics and the
// rate-limited log of connections over it.
type connRate struct {
	rate, burst float64
	waited      prometheus.Counter
	slowed      prometheus.Counter
	log         *slog.Logger

	mu      sync.Mutex
	lastLog time.Time
	since   int // connections slowed since the last log line
}

func newConnRate(rate, burst int64, log *slog.Logger, reg prometheus.Registerer) (*connRate, error) {
	r := &connRate{rate: float64(rate), burst: float64(burst), log: log,
		waited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_extproc_read_rate_wait_seconds_total",
			Help: "Time ext_proc connections waited because they sent faster than --grpc-conn-read-rate (the picker stops reading; HTTP/2 flow control then blocks the sender).",
		}),
		slowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_extproc_read_rate_slowed_connections_total",
			Help: "ext_proc connections that went over --grpc-conn-read-rate (each counted once).",
		}),
	}
	for _, c := range []prometheus.Collector{r.waited, r.slowed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// rateListener gives every accepted connection a token bucket of read bytes.
type rateListener struct {
	net.Listener
	r *connRate
}

func (l *rateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &rateConn{Conn: c, r: l.r, tokens: l.r.burst, last: time.Now(), closed: make(chan struct{})}, nil
}

// rateConn reads at most its bucket's bytes: a Read that finds the bucket in debt first
// waits (until the debt is repaid or the connection is closed), and no Read takes more
// than the burst. Waiting stops the server reading, so the kernel's receive window and
// then the peer's HTTP/2 flow control stop the sender: it blocks instead of spending
// CPU on both sides.
type rateConn struct {
	net.Conn
	r *connRate

	mu      sync.Mutex // Read may be called from more than one goroutine (net.Conn allows it)
	tokens  float64
	last    time.Time
	slowed  bool
	closed  chan struct{}
	closing sync.Once
}

func (c *rateConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wait := c.debt(time.Now()); wait > 0 {
		c.r.note(c)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.closed:
			t.Stop()
		}
		c.r.waited.Add(wait.Seconds())
	}
	if max := int(c.r.burst); len(p) > max {
		p = p[:max]
	}
	n, err := c.Conn.Read(p)
	c.tokens -= float64(n)
	return n, err
}

// debt refills the bucket to now and returns how long it takes to repay its debt.
// Called with c.mu held.
func (c *rateConn) debt(now time.Time) time.Duration {
	if dt := now.Sub(c.last).Seconds(); dt > 0 {
		c.tokens = min(c.r.burst, c.tokens+dt*c.r.rate)
		c.last = now
	}
	if c.tokens >= 0 {
		return 0
	}
	return time.Duration(-c.tokens * float64(time.Second) / c.r.rate)
}

func (c *rateConn) Close() error {
	c.closing.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// note counts a connection's first wait and logs, at most once every 10 s, how many
// connections were slowed since the last line.
func (r *connRate) note(c *rateConn) {
	if c.slowed {
		return
	}
	c.slowed = true
	r.slowed.Inc()
	r.mu.Lock()
	r.since++
	now := time.Now()
	logIt := now.Sub(r.lastLog) >= 10*time.Second
	n := r.since
	if logIt {
		r.lastLog, r.since = now, 0
	}
	r.mu.Unlock()
	if logIt {
		r.log.Warn("an ext_proc connection sends faster than --grpc-conn-read-rate: the picker slows its reads, so its sender waits (logged once per 10 s; see loadaware_extproc_read_rate_slowed_connections_total). If it is Envoy carrying real traffic, raise the rate",
			"peer", c.RemoteAddr().String(), "connections_slowed", n, "rate_bytes_per_s", int64(r.rate), "burst_bytes", int64(r.burst))
	}
}
