// Package gateway is an Envoy stand-in for the benchmark and the demo: an HTTP reverse proxy that
// consults an endpoint picker over Envoy's external-processing (ext_proc) gRPC protocol for every
// request, exactly as Envoy's ext_proc filter does with the configuration the project ships
// (processing_mode SEND for headers and trailers, FULL_DUPLEX_STREAMED or BUFFERED bodies,
// failure_mode_allow false), and then forwards the request to the endpoint the picker named in
// x-gateway-destination-endpoint, as an ORIGINAL_DST cluster with use_http_header does.
//
// One HTTP request is one Process stream. The gateway sends the request headers (with the protocol
// configuration and the optional GIE subset hint), the request body, the upstream response headers
// and the upstream response body; it applies the picker's header and body mutations in both
// directions, answers the client with an ImmediateResponse when the picker sends one, answers 500
// when the stream fails, and cancels the stream when the client goes away so the picker releases
// its booking. An endpoint that fails before its response headers (refused connect, reset) is
// followed by the next one of the picker's list, and when none is left Envoy's local reply (503)
// goes through the picker's response phase, as Envoy does with the shipped fallback route
// (localreply.go). It is a test and benchmark tool: it has no TLS to the client, no retries
// beyond the picker's fallback list, no request trailers, and no metrics of its own; it reports
// every request's Outcome to a callback instead.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BodyMode is how request and response bodies travel to the picker: the ext_proc body send mode.
type BodyMode string

const (
	// FullDuplex is Envoy's FULL_DUPLEX_STREAMED mode: body chunks are sent as they arrive, without
	// waiting for answers, and the picker streams the (possibly mutated) body back.
	FullDuplex BodyMode = "full-duplex"
	// Buffered is Envoy's BUFFERED mode: the gateway waits for the headers answer, then sends the
	// whole body in one message and waits for the body answer.
	Buffered BodyMode = "buffered"
)

// ParseBodyMode returns the BodyMode named by s ("full-duplex" or "buffered").
func ParseBodyMode(s string) (BodyMode, error) {
	switch m := BodyMode(s); m {
	case FullDuplex, Buffered:
		return m, nil
	}
	return "", fmt.Errorf("gateway: unknown body mode %q: use %q or %q", s, FullDuplex, Buffered)
}

// DestinationHeader is the request header (and envoy.lb dynamic-metadata key) that names the
// chosen endpoint, or an ordered comma-separated fallback list.
const DestinationHeader = "x-gateway-destination-endpoint"

// Options configure a Gateway. The zero value is usable: full-duplex, 16 KiB chunks, no hint.
type Options struct {
	// Mode is the body send mode announced in protocol_config; empty means FullDuplex.
	Mode BodyMode
	// ChunkSize is the largest request-body chunk sent to the picker in full-duplex mode
	// (Envoy forwards data as it arrives; this bounds one message). 0 means 16 KiB.
	ChunkSize int
	// SubsetHint, when non-nil, is sent as the GIE subset hint
	// (metadata_context.filter_metadata["envoy.lb.subset_hint"]["x-gateway-destination-endpoint-subset"]).
	SubsetHint []string
	// GenerateRequestID sets x-request-id on requests that lack one before the picker sees them,
	// as Envoy's connection manager does by default.
	GenerateRequestID bool
	// ConnectTimeout bounds one connection attempt to an endpoint; a failed attempt moves to the
	// next endpoint of the list. 0 means 1 s. Ignored when Transport is set.
	ConnectTimeout time.Duration
	// Transport carries requests to the endpoints; nil means a keep-alive transport with
	// ConnectTimeout. Any error of its RoundTrip moves to the next endpoint of the list (the
	// error came before the response headers); errors that wrap a *net.OpError with Op
	// "dial" are connect failures, named so in Envoy's local reply.
	Transport http.RoundTripper
	// DrainTimeout bounds how long a finished stream waits for the picker to end it after the
	// gateway half-closes it; then the stream is cancelled. 0 means 5 s.
	DrainTimeout time.Duration
	// FailOpen is Envoy's failure_mode_allow true: when the picker's stream fails, the request
	// goes on without the picker. Before the picker named an endpoint it goes to the next of
	// Fallback in turn (the shipped configs' engine_fallback route) with the client's own
	// body; after, the endpoint's response continues to the client unprocessed (full-duplex
	// mode). The client's request body is then read whole before the picker sees it.
	FailOpen bool
	// Fallback are the engines a request the picker did not route goes to under FailOpen;
	// without them such a request fails as without FailOpen.
	Fallback []string
	// OnOutcome, when set, receives every request's Outcome when its handler returns. It is called
	// from the request's goroutine and must not block for long.
	OnOutcome func(Outcome)
	// Logger receives errors, each with what to do; nil means slog.Default().
	Logger *slog.Logger
}

// Outcome is what happened to one request, reported to Options.OnOutcome.
type Outcome struct {
	RequestID string // x-request-id as sent upstream ("" when absent)
	Method    string
	Path      string
	// Endpoint is the endpoint that answered ("" when none did); Attempts counts the endpoints
	// tried, including connection failures.
	Endpoint string
	Attempts int
	// Destinations is the picker's ordered endpoint list.
	Destinations []string
	// Decision is the candidates' scores and the decision's reason from the picker's dynamic
	// metadata (zero when the picker sent none).
	Decision Decision
	// Status is the HTTP status sent to the client; 0 when the client went away first.
	Status int
	// Immediate is true when the picker answered the client itself (ImmediateResponse).
	Immediate bool
	// Err says what went wrong, when something did ("" on success).
	Err string
	// FailedOpen says where the picker's stream failed when FailOpen carried the request on:
	// "request" (sent to a Fallback engine) or "response" (continued unprocessed); "" when
	// it did not fail.
	FailedOpen string
	// ClientGone is true when the client went away before the response ended; the gateway then
	// cancelled the ext_proc stream, as Envoy resets it.
	ClientGone bool
	// PickerTime is the picker's decision time: from sending the request headers to receiving
	// the answer that carries the destination (full-duplex: the headers response, which the
	// picker holds until the body ended; buffered: the body response; body-less requests:
	// the headers response).
	PickerTime time.Duration
	// Upstream is the time from sending the request to the endpoint to reading the end of its
	// response body: the part of Total the gateway and the picker did not add.
	Upstream time.Duration
	// TTFB is the time from the request's arrival to the first response body byte written to
	// the client (to the response headers when there is no body).
	TTFB time.Duration
	// Total is the time from the request's arrival to the end of the response.
	Total time.Duration
}

// Added is the latency the gateway and the picker added: Total minus Upstream.
func (o Outcome) Added() time.Duration { return o.Total - o.Upstream }

// Gateway is an http.Handler that routes every request through the picker. Create it with New or
// Dial; it is safe for concurrent use.
type Gateway struct {
	client    extprocv3.ExternalProcessorClient
	conn      *grpc.ClientConn // owned when created by Dial
	target    string           // the picker's address, for error messages
	transport http.RoundTripper
	opts      Options
	log       *slog.Logger
	active    sync.WaitGroup // requests being served, and streams being drained
	chunks    sync.Pool      // *[]byte of ChunkSize: read buffers of the body senders
	fallbackN atomic.Uint64  // the next Fallback engine
}

// New returns a Gateway that opens its ext_proc streams on conn.
func New(conn grpc.ClientConnInterface, opts Options) (*Gateway, error) {
	if conn == nil {
		return nil, errors.New("gateway: nil gRPC connection: pass a connection to the picker's ext_proc port or use Dial")
	}
	if opts.Mode == "" {
		opts.Mode = FullDuplex
	}
	if _, err := ParseBodyMode(string(opts.Mode)); err != nil {
		return nil, err
	}
	if opts.ChunkSize < 0 {
		return nil, fmt.Errorf("gateway: chunk size %d is negative: pass a positive size or 0 for 16 KiB", opts.ChunkSize)
	}
	if opts.ChunkSize == 0 {
		opts.ChunkSize = 16 << 10
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = time.Second
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 5 * time.Second
	}
	g := &Gateway{
		client:    extprocv3.NewExternalProcessorClient(conn),
		transport: opts.Transport,
		opts:      opts,
		log:       opts.Logger,
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	g.target = "the gateway's configured address"
	if cc, ok := conn.(*grpc.ClientConn); ok {
		g.target = cc.Target()
	}
	if g.transport == nil {
		g.transport = newTransport(opts.ConnectTimeout)
	}
	g.chunks.New = func() any {
		b := make([]byte, opts.ChunkSize)
		return &b
	}
	return g, nil
}

// Dial returns a Gateway that talks plaintext gRPC (HTTP/2) to the picker at addr ("host:port").
// Close releases the connection.
func Dial(addr string, opts Options) (*Gateway, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gateway: connect to picker %s: %w", addr, err)
	}
	g, err := New(conn, opts)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	g.conn = conn
	return g, nil
}

// Wait blocks until every request that has arrived has been answered, reported to OnOutcome, and
// its ext_proc stream closed by the picker (or cancelled after DrainTimeout). After Wait, the
// picker has seen the end of every stream the gateway opened. Call it when no new requests arrive
// (for instance once every response has been read).
func (g *Gateway) Wait() { g.active.Wait() }

// Close waits like Wait, then closes the idle upstream connections and, for a Gateway made by
// Dial, the gRPC connection. Serve no requests after Close.
func (g *Gateway) Close() error {
	g.Wait()
	if t, ok := g.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	if g.conn != nil {
		return g.conn.Close()
	}
	return nil
}

// ServeLoopback serves h (a Gateway, or a front spreading requests over several) over HTTP on
// a free loopback port, and returns the server, which Close stops, and its base URL.
func ServeLoopback(h http.Handler) (*http.Server, string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("listen for the gateway on a loopback port: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	return srv, "http://" + lis.Addr().String(), nil
}

// ServeHTTP routes one request through the picker to an endpoint. When the picker's stream or the
// endpoint fails after the response has started, the response is aborted (http.ErrAbortHandler),
// as Envoy resets the downstream stream.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.active.Add(1)
	defer g.active.Done()
	ex := newExchange(g, w, r)
	if g.opts.FailOpen && !ex.readRawBody() {
		ex.finish()
		return
	}
	ex.run()
	ex.finish()
}

// finish reports the exchange and aborts the client's stream when it failed mid-response.
func (ex *exchange) finish() {
	g := ex.g
	ex.out.Total = time.Since(ex.start)
	if ex.out.TTFB == 0 && ex.wrote {
		ex.out.TTFB = ex.headAt
	}
	if g.opts.OnOutcome != nil {
		g.opts.OnOutcome(ex.out)
	}
	if ex.abort {
		panic(http.ErrAbortHandler)
	}
}

// connectError marks a failure to connect to an endpoint: the next endpoint of the list is tried.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

func newTransport(connectTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &connectError{err: err}
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// isConnectError reports whether err is a failure to connect (not a failure after connecting).
func isConnectError(err error) bool {
	var ce *connectError
	if errors.As(err, &ce) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func slogLevel(status int) slog.Level {
	if status < http.StatusInternalServerError {
		return slog.LevelWarn
	}
	return slog.LevelError
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
