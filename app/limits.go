package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Connection limits and timeouts of the servers. Defaults are sized for a 1 GiB pod with
// one or a few Envoys as the ext_proc clients and Prometheus plus probes on HTTP.
const (
	DefaultMaxGRPCConns = 1024
	DefaultMaxHTTPConns = 128

	grpcHandshakeTimeout = 10 * time.Second
	grpcIdleConnTimeout  = 5 * time.Minute // a connection without streams this long is closed
	grpcPingInterval     = 30 * time.Second
	grpcPingTimeout      = 10 * time.Second
	grpcMinClientPing    = 10 * time.Second // clients pinging more often get GOAWAY (Envoy's default is none)

	// Static HTTP/2 flow-control windows (gRPC's default grows them up to 16 MiB): a stream
	// that stops reading (paced, decision 0710) leaves at most grpcStreamWindow of its body
	// in the transport. At a 0.5 ms round trip one stream still moves 500 MB/s.
	grpcStreamWindow = 256 << 10
	grpcConnWindow   = 4 << 20

	// DefaultMaxMessageBytes is the largest ext_proc message received: gRPC's own default.
	// A full-duplex body chunk is what Envoy read at once (at most its connection buffer,
	// 1 MiB by default); a buffered body comes whole. One over gatedMessageBytes is counted
	// against --max-buffered-bytes as it arrives (decision 1180).
	DefaultMaxMessageBytes = 4 << 20

	// grpcMaxHeaderListBytes bounds the HTTP/2 header block of one gRPC stream (grpc-go's
	// default is 16 MiB, buffered while its CONTINUATION frames arrive, one block per
	// connection at a time). Envoy's ext_proc stream carries a few hundred bytes of
	// metadata: the request's own headers travel inside messages.
	grpcMaxHeaderListBytes = 64 << 10

	// gatedMessageBytes: ext_proc messages longer than this are taken from
	// --max-buffered-bytes as their length arrives (h2gate, decision 1180); shorter ones
	// (request headers among them) are what a stream's static window and one short message
	// hold, the S(W + R) term of the bound.
	gatedMessageBytes = 64 << 10

	DefaultMaxConnsPerIP = 16 // metrics and health ports: Prometheus and probes need a few
	httpMaxHeaderBytes   = 64 << 10
)

// The metrics server's timeouts (variables so tests can shorten them).
var (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 30 * time.Second
	httpWriteTimeout      = 60 * time.Second
	httpIdleTimeout       = 30 * time.Second
)

// grpcOptions are the ext_proc and health servers' options: keepalive enforcement, a
// handshake timeout, and TLS (optionally requiring a client certificate) when creds is set.
func grpcOptions(creds credentials.TransportCredentials) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ConnectionTimeout(grpcHandshakeTimeout),
		grpc.InitialWindowSize(grpcStreamWindow),
		grpc.InitialConnWindowSize(grpcConnWindow),
		grpc.MaxHeaderListSize(grpcMaxHeaderListBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinClientPing, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: grpcIdleConnTimeout, Time: grpcPingInterval, Timeout: grpcPingTimeout}),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	return opts
}

// serverTLS is the ext_proc TLS configuration: the serving certificate and, with clientCA
// (a PEM file), mutual TLS: a client must present a certificate signed by one of its CAs.
func serverTLS(certPath, clientCA string) (*tls.Config, error) {
	cert, err := loadOrMakeCert(certPath)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("cannot read --client-ca %s: %v (give a PEM file of the CA that signs Envoy's client certificate)", clientCA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--client-ca %s holds no PEM certificate: give the CA that signs Envoy's client certificate", clientCA)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// limitListener caps the connections l holds: at most perIP from one IP (more are closed
// at once, counted in refused) and n in all (more wait in the kernel's backlog instead of
// taking file descriptors). One client flooding a port thus cannot starve the others.
func limitListener(l net.Listener, n, perIP int, refused prometheus.Counter) net.Listener {
	if perIP > 0 {
		l = &perIPListener{Listener: l, max: perIP, open: map[string]int{}, refused: refused}
	}
	if n > 0 {
		l = netutil.LimitListener(l, n)
	}
	return l
}

// perIPListener closes a new connection whose IP already holds max connections.
type perIPListener struct {
	net.Listener
	max     int
	refused prometheus.Counter
	mu      sync.Mutex
	open    map[string]int
}

func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := c.RemoteAddr().String()
		if h, _, err := net.SplitHostPort(ip); err == nil {
			ip = h
		}
		l.mu.Lock()
		full := l.open[ip] >= l.max
		if !full {
			l.open[ip]++
		}
		l.mu.Unlock()
		if full {
			l.refused.Inc()
			c.Close()
			continue
		}
		return &ipConn{Conn: c, l: l, ip: ip}, nil
	}
}

type ipConn struct {
	net.Conn
	l    *perIPListener
	ip   string
	once sync.Once
}

func (c *ipConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.open[c.ip]--; c.l.open[c.ip] <= 0 {
			delete(c.l.open, c.ip)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// newHTTPServer is the metrics/admin server: every phase of a connection is timed out, so
// idle or slow clients cannot hold the (capped) connections.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: httpReadHeaderTimeout, ReadTimeout: httpReadTimeout,
		WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout, MaxHeaderBytes: httpMaxHeaderBytes}
}
