package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/ratelog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/peer"
)

// Defaults of the ext_proc per-connection read rate (decision 0707). One Envoy worker
// thread holds one connection and carries its share of every request body (and, in
// FULL_DUPLEX_STREAMED response mode, every response body): even 1,000 requests/s of
// 100 KB bodies over four workers is 25 MB/s a connection. The burst lets two
// --max-body-bytes bodies (16 MiB) through at once, of which one may be large bodies that
// read ahead of the rate (connRate.bodyBurst, decision 1183).
const (
	DefaultConnReadRate  = 32 << 20 // bytes per second, per ext_proc connection
	DefaultConnReadBurst = 32 << 20 // bytes
)

// framingShare bounds what the connection carries besides a body's bytes, as a share of
// them (1/64): an HTTP/2 frame header (9 bytes) per frame of at most 16 KiB, a gRPC length
// prefix (5) and the message's field tags (under 20) per body chunk, and the request's
// headers message. Envoy's smallest chunks, 16 KiB, come to 0.2%.
const framingShare = 64

// connRate is the read-rate policy the ext_proc connections share: the rate, the metrics,
// the rate-limited log of connections over it, and the registry of open connections (where
// a stream finds its connection: pacer). Each connection's bucket of read bytes is in its
// extConn (decision 0710).
//
// bodyBurst is how far a connection's large bodies may run ahead of the rate: one
// --max-body-bytes body (at most the burst), where the connection as a whole gets its
// burst. A connection with a full bucket was otherwise read as fast as it sent for a whole
// burst, two largest bodies at the defaults (32 MiB): at the 1.7-4 ms of CPU per MiB the
// picker spends receiving a large body (decision 1183), 55-130 ms of both cores of a
// 2-core pod in one go, all of it waited for by the requests arriving meanwhile. One
// largest body halves that and still lets it through unpaced on an idle connection.
type connRate struct {
	rate, burst float64
	bodyBurst   float64
	waited      prometheus.Counter
	slowed      prometheus.Counter
	bodyWaits   prometheus.Counter // waits of large bodies within the connection's burst
	log         *slog.Logger

	logs  *ratelog.Limiter // the slowed-connection line, once per 10 s
	conns *extConns
}

// newConnRate paces each connection to rate, with the whole connection read ahead of it
// by at most burst and its large bodies by at most one maxBody body and its framing (or
// burst, if smaller), finding connections in conns.
func newConnRate(rate, burst, maxBody int64, conns *extConns, log *slog.Logger, reg prometheus.Registerer) (*connRate, error) {
	r := &connRate{rate: float64(rate), burst: float64(burst), bodyBurst: float64(min(burst, maxBody+maxBody/framingShare)), log: log, logs: ratelog.New(10 * time.Second), conns: conns,
		waited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_extproc_read_rate_wait_seconds_total",
			Help: "Time ext_proc streams with large bodies waited because their connection sent faster than --grpc-conn-read-rate (the stream stops reading; HTTP/2 flow control then blocks that stream's sender).",
		}),
		slowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_extproc_read_rate_slowed_connections_total",
			Help: "ext_proc connections that went over --grpc-conn-read-rate (each counted once).",
		}),
		bodyWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_extproc_read_rate_body_burst_waits_total",
			Help: "Waits of ext_proc streams with large bodies on a connection still within --grpc-conn-read-burst but more than one --max-body-bytes of large bodies ahead of --grpc-conn-read-rate (decision 1183).",
		}),
	}
	for _, c := range []prometheus.Collector{r.waited, r.slowed, r.bodyWaits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// pacer is extproc.Config.Pacer: the extConn the stream came on, found by the stream's
// peer address (the connection's RemoteAddr, the key Accept filed it under), or nil. It is
// asked once per stream and only of streams whose bodies go past
// --grpc-unpaced-body-bytes. (A gRPC stats handler could tag each connection instead, but
// any stats handler makes gRPC copy every received message and allocate a record of every
// message sent and received: decision 1121.)
func (r *connRate) pacer(ctx context.Context) extproc.Pacer {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	if c := r.conns.byAddr(p.Addr); c != nil {
		return c
	}
	return nil
}

// note counts a connection's first wait and logs, at most once every 10 s, how many
// connections were slowed since the last line.
func (r *connRate) note(c *extConn) {
	r.slowed.Inc()
	if n, logIt := r.logs.Due("", time.Now()); logIt {
		r.log.Warn("an ext_proc connection sends faster than --grpc-conn-read-rate: the picker slows its large bodies, so their sender waits (logged once per 10 s; see loadaware_extproc_read_rate_slowed_connections_total). If it is Envoy carrying real traffic, raise the rate",
			"peer", c.peer, "connections_slowed", n, "rate_bytes_per_s", int64(r.rate), "burst_bytes", int64(r.burst))
	}
}
