// Package extproc is the Envoy external-processing (ext_proc) server of the endpoint
// picker: one gRPC stream per HTTP request, handled as an explicit state machine.
//
// It reads the request headers and the OpenAI body, asks a Picker for endpoints, and
// answers Envoy with the x-gateway-destination-endpoint header and the same value in the
// envoy.lb dynamic metadata, with the candidates' scores and the decision's reason beside it
// (metadata.go). It then passes the response through unchanged and releases
// the booking exactly once however the stream ends. Client errors become
// ImmediateResponses with a readable body, never gRPC errors. extproc is transport only:
// it makes no routing decision itself.
package extproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/ratelog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names of the GIE protocol.
const (
	DestinationHeader  = "x-gateway-destination-endpoint"
	SubsetHint         = "x-gateway-destination-endpoint-subset"
	LBNamespace        = "envoy.lb"
	SubsetNamespace    = "envoy.lb.subset_hint"
	RequestIDHeader    = "x-request-id"
	ExplainHeader      = "x-loadaware-explain"
	DecisionHeader     = "x-loadaware-decision"
	MaxStreamedChunk   = 62000 // bytes per StreamedBodyResponse
	DefaultMaxBodySize = 16 << 20
)

// BodyMode is how Envoy sends bodies to the picker.
type BodyMode int

// The body modes the picker serves.
const (
	FullDuplex BodyMode = iota // FULL_DUPLEX_STREAMED: what GIE requires
	Buffered                   // BUFFERED: older Envoy Gateway setups
)

// ParseBodyMode reads "full-duplex" or "buffered".
func ParseBodyMode(s string) (BodyMode, error) {
	switch s {
	case "full-duplex", "full_duplex_streamed", "FULL_DUPLEX_STREAMED":
		return FullDuplex, nil
	case "buffered", "BUFFERED":
		return Buffered, nil
	}
	return 0, fmt.Errorf("body mode %q is not supported: use full-duplex (GIE's FULL_DUPLEX_STREAMED) or buffered", s)
}

func (m BodyMode) envoy() filterv3.ProcessingMode_BodySendMode {
	if m == Buffered {
		return filterv3.ProcessingMode_BUFFERED
	}
	return filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

func (m BodyMode) String() string {
	if m == Buffered {
		return "buffered"
	}
	return "full-duplex"
}

// Picker is what the server needs of the decision engine: picker.Picker's PickInto, which
// decides into the caller's Decision and reuses its memory (see its ownership contract).
type Picker interface {
	PickInto(ctx context.Context, r picker.Request, d *picker.Decision) error
}

// Config configures a Server.
type Config struct {
	BodyMode      BodyMode // used when Envoy sends no protocol_config
	MaxBodyBytes  int64    // request bodies over this get 413; default DefaultMaxBodySize
	SessionHeader string   // default "x-user-id"
	Logger        *slog.Logger
	Registerer    prometheus.Registerer // nil: metrics are not registered
	OmitScores    bool                  // leave the candidates' scores and the reason out of the dynamic metadata

	Limits     Limits      // stream, buffered-byte and idle bounds; zero fields take the defaults
	Explain    ExplainMode // who may get the decision header; the zero value is ExplainToken
	AdminToken string      // the bearer token ExplainToken accepts; empty: nobody gets it

	// OnResponse, when set, is told the HTTP status of every routed request's response
	// (what Envoy saw from the first endpoint of the answer, or its own local reply such
	// as a 503 for a connect failure). It must be fast and must not block.
	OnResponse func(endpoint string, status int)

	// Pacer, when set, gives a stream the Pacer of the connection it came on (from the
	// stream's context), or nil for none.
	Pacer func(ctx context.Context) Pacer
}

// A Pacer slows the large bodies of one ext_proc connection (decision 0710). Delay is how long
// a stream whose body has gone past Limits.UnpacedBodyBytes waits before each further body
// chunk (request or response) is processed: 0 while the connection is within its rate. A
// waiting stream does not receive, so gRPC stops renewing that stream's flow-control window
// (the connection's window is renewed as data arrives) and only that stream's sender blocks;
// the connection's small requests never queue behind its large ones. Delay must be safe for
// concurrent use.
type Pacer interface {
	Delay() time.Duration
}

// Server implements envoy.service.ext_proc.v3.ExternalProcessor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	cfg     Config
	picker  Picker
	metrics *metrics
	bytes   *budget
	streams *gate
	// overloadLog lets each limit's refusal line through once per overloadLogPeriod.
	overloadLog *ratelog.Limiter

	// decisions holds Decisions between streams, so a decision reuses the memory of an
	// earlier stream's (picker.PickInto) rather than allocating its own. A stream takes
	// one when it decides and puts it back when it ends, after releasing its booking;
	// nothing of a Decision is read after that.
	decisions sync.Pool

	streamDone func() // test hook: called after a stream's booking is released
}

// NewServer returns a Server that asks p for decisions.
func NewServer(p Picker, cfg Config) (*Server, error) {
	if p == nil {
		return nil, errors.New("extproc: NewServer needs a Picker")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodySize
	}
	if cfg.SessionHeader == "" {
		cfg.SessionHeader = "x-user-id"
	}
	cfg.SessionHeader = strings.ToLower(cfg.SessionHeader)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Limits.setDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, picker: p, metrics: m,
		bytes: &budget{max: cfg.Limits.MaxBufferedBytes}, streams: &gate{max: int64(cfg.Limits.MaxStreams)},
		overloadLog: ratelog.New(overloadLogPeriod)}, nil
}

// Process implements the ext_proc stream: one HTTP request.
//
// The stream is served by its own worker goroutine, which receives, decides and answers
// each message itself (no hand-over per message: decision 1122). Process only watches it:
// it returns when the worker ends, or, while the request is still being read, once no part
// of it has arrived for Limits.IdleTimeout; it then answers 408 itself and returns, which
// ends the gRPC stream and so fails the worker's pending Recv. The worker releases the
// booking and the stream's budget when it ends, in either case.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := &stream{srv: srv, s: s, reqMode: s.cfg.BodyMode.envoy(), respMode: s.cfg.BodyMode.envoy(),
		done: make(chan error, 1), decision: &noDecision, lastRecv: time.Now()}
	if !s.streams.enter() {
		st.refuse = "overloaded"
	}
	go st.work()
	err := st.watch()
	if err != nil {
		s.metrics.streamErrors.WithLabelValues(errKind(srv.Context(), err)).Inc()
		if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
			return nil // the client or Envoy went away: nothing to answer
		}
		s.cfg.Logger.Warn("ext_proc stream ended with an error; the request's booking was released",
			"request_id", st.requestID, "err", err)
	}
	return err
}

// work runs the stream's conversation and then gives back what it holds: its place among
// the streams, its body bytes, its booking and its Decision. It holds st.mu except while it
// waits in Recv, so watch sees the stream only between messages.
func (st *stream) work() {
	growStack()
	st.mu.Lock()
	err := st.run()
	s := st.s
	s.streams.leave()
	st.freeBody()
	st.release()
	if st.decision != &noDecision {
		st.decision.Booking = nil // released above; PickInto overwrites the rest
		s.decisions.Put(st.decision)
	}
	st.ended = true
	st.mu.Unlock()
	if s.streamDone != nil {
		s.streamDone()
	}
	st.done <- err
}

// watch waits for the worker to end and reports its error. While the request is being
// read, it answers 408 once no message has arrived for the idle timeout, marks the stream
// timed out (the worker then stops at its next message or failed Recv) and returns at once.
func (st *stream) watch() error {
	idleAfter := st.s.cfg.Limits.IdleTimeout
	idle := time.NewTimer(idleAfter)
	defer idle.Stop()
	for {
		select {
		case err := <-st.done:
			return err
		case <-idle.C:
		}
		st.mu.Lock()
		if st.ended || st.decided {
			st.mu.Unlock()
			return <-st.done // routed: a slow engine is waited for
		}
		if wait := idleAfter - time.Since(st.lastRecv); wait > 0 {
			st.mu.Unlock()
			idle.Reset(wait)
			continue
		}
		st.timedOut = true
		err := st.overloaded("idle-timeout", typev3.StatusCode_RequestTimeout, "RequestTimeout",
			fmt.Sprintf("no part of the request arrived for %v while the picker was reading it (--stream-idle-timeout)", idleAfter))
		st.mu.Unlock()
		return err
	}
}

// errKind labels a stream error for the metrics.
func errKind(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil || status.Code(err) == codes.Canceled:
		return "canceled"
	case status.Code(err) == codes.InvalidArgument:
		return "protocol"
	case errors.Is(err, errSend):
		return "send"
	}
	return "recv"
}

var errSend = errors.New("ext_proc: send")

// recv receives the stream's next message with st.mu released, so that watch may time
// the stream out meanwhile; with a Pacer, a body chunk past Limits.UnpacedBodyBytes is
// processed only after the pacer's Delay. The Pacer is asked for once, when the stream's
// bodies first go past that bound. recv returns errTimedOut when watch timed the stream out.
func (st *stream) recv() (*extprocv3.ProcessingRequest, error) {
	st.mu.Unlock()
	req, err := st.srv.Recv()
	st.mu.Lock()
	if st.timedOut {
		return nil, errTimedOut
	}
	st.lastRecv = time.Now()
	if n := len(req.GetRequestBody().GetBody()) + len(req.GetResponseBody().GetBody()); st.s.cfg.Pacer != nil && n > 0 {
		if st.pacedBytes += int64(n); st.pacedBytes > st.s.cfg.Limits.UnpacedBodyBytes {
			if !st.askedPacer {
				st.pacer, st.askedPacer = st.s.cfg.Pacer(st.srv.Context()), true
			}
			if st.pacer != nil {
				st.pace(st.pacer.Delay())
			}
		}
	}
	return req, err
}

// errTimedOut is recv's error once watch has answered 408 and returned.
var errTimedOut = errors.New("ext_proc: the stream timed out while the request was read")

// pace waits d, at most half the idle timeout, or until the stream is cancelled (what is
// received next is then the cancellation). It holds st.mu: a stream is never timed out
// for its own pacing.
func (st *stream) pace(d time.Duration) {
	if d = min(d, st.s.cfg.Limits.IdleTimeout/2); d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-st.srv.Context().Done():
	}
}

// stream is the state of one HTTP request's ext_proc conversation.
type stream struct {
	srv extprocv3.ExternalProcessor_ProcessServer
	s   *Server

	// mu is held by the worker while it handles a message and by watch while it looks at
	// the stream; the fields below are the worker's except where noted.
	mu       sync.Mutex
	done     chan error // the worker's result, sent once it has given back what it held
	ended    bool       // the worker has given back what it held (read by watch)
	timedOut bool       // watch answered 408 and returned (set by watch)
	lastRecv time.Time  // when the last message arrived (read by watch)

	pacer      Pacer // the connection's, once askedPacer
	askedPacer bool
	pacedBytes int64 // request and response body bytes received, for the pacer

	reqMode, respMode filterv3.ProcessingMode_BodySendMode
	refuse            string // non-empty: answer 503 at the headers (over a limit)
	held              int64  // request body bytes taken from the server's budget
	authorization     string
	quiet             bool // a refusal logged by overloaded, not per request
	sawHeaders        bool
	path              string
	requestID         string
	generatedID       bool
	session           string
	explain           bool
	subset            []string
	body              bytes.Buffer // the request body, when it came in several frames
	whole             []byte       // the request body, when it came in one frame
	decided           bool
	decision          *picker.Decision // &noDecision until decide takes one from the pool
	finished          bool             // the response ended or an ImmediateResponse was sent
}

// noDecision is a stream's decision before it has one: empty, never written.
var noDecision picker.Decision

// run receives until the stream ends, with st.mu held (recv releases it while it waits).
// A nil error means the conversation ended normally or watch ended it.
func (st *stream) run() error {
	for first := true; ; first = false {
		req, err := st.recv()
		if err == errTimedOut {
			return nil // watch answered
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if first && req.GetProtocolConfig() != nil {
			pc := req.GetProtocolConfig()
			st.reqMode, st.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
		}
		if md := req.GetMetadataContext(); md != nil && st.subset == nil {
			st.subset = subsetHint(md)
		}
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			err = st.requestHeaders(r.RequestHeaders)
		case *extprocv3.ProcessingRequest_RequestBody:
			err = st.requestBody(r.RequestBody)
		case *extprocv3.ProcessingRequest_RequestTrailers:
			err = st.requestTrailers()
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			err = st.responseHeaders(r.ResponseHeaders)
		case *extprocv3.ProcessingRequest_ResponseBody:
			err = st.responseBody(r.ResponseBody)
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			st.release()
			err = st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
				ResponseTrailers: &extprocv3.TrailersResponse{}}})
		default:
			return errUnknownMessage
		}
		if err != nil {
			return err
		}
		if st.decided {
			st.freeBody() // routed: the body is no longer needed
		}
		if st.finished && st.decision.Booking == nil {
			return nil // an ImmediateResponse ended the conversation
		}
	}
}

func (st *stream) send(r *extprocv3.ProcessingResponse) error {
	if err := st.srv.Send(r); err != nil {
		return fmt.Errorf("%w: %w", errSend, err)
	}
	return nil
}

// freeBody drops the buffered request body and gives its bytes back to the budget.
func (st *stream) freeBody() {
	st.s.bytes.give(st.held)
	st.held = 0
	st.body = bytes.Buffer{}
	st.whole = nil
}

// release ends the request's booking; safe to call any number of times.
func (st *stream) release() {
	if b := st.decision.Booking; b != nil && b.Release() {
		st.s.metrics.released.Inc()
	}
}

func (st *stream) requestHeaders(h *extprocv3.HttpHeaders) error {
	if st.sawHeaders {
		return status.Error(codes.InvalidArgument, "ext_proc: request headers arrived twice on one stream")
	}
	st.sawHeaders = true
	var contentLength int64 = -1
	for _, hv := range h.GetHeaders().GetHeaders() {
		v := headerValue(hv)
		switch strings.ToLower(hv.GetKey()) {
		case ":path":
			st.path = v
		case RequestIDHeader:
			st.requestID = v
		case st.s.cfg.SessionHeader:
			st.session = v
		case ExplainHeader:
			st.explain = v == "1" || strings.EqualFold(v, "true")
		case "authorization":
			st.authorization = v
		case "content-length":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				contentLength = n
			}
		}
	}
	if i := strings.IndexAny(st.path, "?#"); i >= 0 {
		st.path = st.path[:i]
	}
	if st.requestID == "" {
		st.requestID, st.generatedID = newRequestID(), true
	}
	if st.explain {
		st.explain = explainAllowed(st.s.cfg.Explain, st.s.cfg.AdminToken, st.authorization)
		st.s.metrics.explain.WithLabelValues(map[bool]string{true: "given", false: "refused"}[st.explain]).Inc()
	}
	if st.refuse != "" {
		return st.overloaded("streams", typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable",
			fmt.Sprintf("the picker is serving its limit of %d concurrent requests (--max-streams): retry shortly", st.s.cfg.Limits.MaxStreams))
	}
	if contentLength > st.s.cfg.MaxBodyBytes {
		return st.tooLarge()
	}
	// A request without a body, or a mode in which no body will reach us: decide now.
	if h.GetEndOfStream() || !readsBody(st.reqMode) {
		if !h.GetEndOfStream() {
			st.s.metrics.bodyless.WithLabelValues(st.reqMode.String()).Inc()
		}
		return st.decide(nil, false, inHeaders)
	}
	if st.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return nil // hold the headers response until the body ends
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{}}})
}

// readsBody reports whether the picker reads the request body in mode m before routing:
// FULL_DUPLEX_STREAMED and BUFFERED (and BUFFERED_PARTIAL). In any other mode (NONE,
// STREAMED, or one added to Envoy after this build) it routes at the headers.
func readsBody(m filterv3.ProcessingMode_BodySendMode) bool {
	switch m {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_BUFFERED_PARTIAL:
		return true
	}
	return false
}

func (st *stream) requestBody(b *extprocv3.HttpBody) error {
	if st.decided {
		if !readsBody(st.reqMode) {
			// STREAMED (or a mode this build does not know): routed at the headers on load
			// alone; Envoy still sends every chunk and waits for one answer each.
			return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{}}})
		}
		return status.Error(codes.InvalidArgument, "ext_proc: request body arrived after the request was routed")
	}
	if int64(st.body.Len()+len(b.GetBody())) > st.s.cfg.MaxBodyBytes {
		return st.tooLarge()
	}
	// A body that arrives whole in one frame is routed at once; only bytes held while
	// waiting for more take from the shared budget.
	if n := int64(len(b.GetBody())); st.held > 0 || (!b.GetEndOfStream() && st.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED) {
		if !st.s.bytes.take(n) {
			return st.overloaded("buffered-bytes", typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable",
				fmt.Sprintf("the picker holds its limit of %d bytes of request bodies being read (--max-buffered-bytes): retry shortly", st.s.cfg.Limits.MaxBufferedBytes))
		}
		st.held += n
	}
	if st.body.Len() == 0 && (b.GetEndOfStream() || st.reqMode != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED) {
		st.whole = b.GetBody() // the body in one frame: no copy
	} else {
		st.body.Write(b.GetBody())
	}
	if st.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		if !b.GetEndOfStream() {
			return nil
		}
		return st.decideFullDuplex(true)
	}
	// BUFFERED (and BUFFERED_PARTIAL): Envoy sent all it will send and waits.
	return st.decide(st.bodyBytes(), true, inBody)
}

func (st *stream) requestTrailers() error {
	if st.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && !st.decided {
		// The body ended with trailers rather than an end_of_stream body chunk.
		if err := st.decideFullDuplex(false); err != nil || st.finished {
			return err
		}
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}})
}

// decideFullDuplex routes on the buffered body, then sends the held headers response and
// the body back in chunks; eos says whether the last chunk ends the request stream.
func (st *stream) decideFullDuplex(eos bool) error {
	body := st.bodyBytes()
	err := st.decide(body, true, inHeaders)
	if err != nil || st.finished {
		return err
	}
	for off := 0; off < len(body) || off == 0; off += MaxStreamedChunk {
		end := min(off+MaxStreamedChunk, len(body))
		if err := st.send(streamedBody(true, body[off:end], eos && end == len(body))); err != nil {
			return err
		}
		if end == len(body) {
			break
		}
	}
	return nil
}

// bodyBytes is the request body received so far.
func (st *stream) bodyBytes() []byte {
	if st.whole != nil {
		return st.whole
	}
	return st.body.Bytes()
}

// streamedBody is a request (or response) StreamedBodyResponse.
func streamedBody(request bool, b []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

// Where the routing answer goes: the request headers response (full-duplex, header-only)
// or the request body response (buffered).
const (
	inHeaders = false
	inBody    = true
)

// decide parses body (when hasBody), picks, and sends the routing answer in the headers or
// the body response. Client errors and routing failures become an ImmediateResponse.
func (st *stream) decide(body []byte, hasBody, answerInBody bool) error {
	st.decided = true
	req := picker.Request{RequestID: st.requestID, Path: st.path, Session: st.session, Subset: st.subset, Explain: st.explain}
	if hasBody {
		b, err := ParseBody(st.path, body)
		if err != nil {
			return st.immediate(typev3.StatusCode_BadRequest, "BadRequest", err.Error())
		}
		req.Model, req.Prompt, req.Tokens = b.Model, b.Prompt, b.Tokens
		if b.Chat {
			req.ChatBody = body
		}
	}
	d, _ := st.s.decisions.Get().(*picker.Decision)
	if d == nil {
		d = new(picker.Decision)
	}
	st.decision = d
	if err := st.s.picker.PickInto(st.srv.Context(), req, d); err != nil {
		if d.Booking != nil { // Pick books nothing when it fails; should that change, nothing leaks
			d.Booking.Release()
			d.Booking = nil
		}
		if st.srv.Context().Err() != nil {
			return st.srv.Context().Err()
		}
		return st.immediate(typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable", err.Error())
	}
	value := strings.Join(d.Endpoints, ",")
	set := []*corev3.HeaderValueOption{setHeader(DestinationHeader, value)}
	if st.generatedID {
		set = append(set, setHeader(RequestIDHeader, st.requestID))
	}
	c := &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}
	resp := &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: c}}}
	// dynamic_metadata, encoded directly (appendRoutingMetadata): the receiver decodes it.
	resp.ProtoReflect().SetUnknown(appendRoutingMetadata(nil, value, *d, st.s.cfg.OmitScores))
	if answerInBody {
		resp.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: c}}
	}
	return st.send(resp)
}

func (st *stream) tooLarge() error {
	return st.immediate(typev3.StatusCode_PayloadTooLarge, "BadRequest",
		fmt.Sprintf("the request body is over the limit of %d bytes (--max-body-bytes)", st.s.cfg.MaxBodyBytes))
}

// immediate answers the client directly with an error and ends the conversation.
func (st *stream) immediate(code typev3.StatusCode, kind, msg string) error {
	st.finished = true
	st.s.metrics.immediate.WithLabelValues(strconv.Itoa(int(code))).Inc()
	if !st.quiet {
		st.s.cfg.Logger.Info("request refused", "request_id", st.requestID, "status", int(code), "reason", msg)
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: code},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader("content-type", "text/plain; charset=utf-8"),
				setHeader(RequestIDHeader, st.requestID),
			}},
			Body:    []byte("inference error: " + kind + " - " + msg),
			Details: "loadaware_epp_" + strings.ToLower(kind),
		}}})
}

func (st *stream) responseHeaders(h *extprocv3.HttpHeaders) error {
	hr := &extprocv3.HeadersResponse{}
	if st.s.cfg.OnResponse != nil && len(st.decision.Endpoints) > 0 {
		for _, hv := range h.GetHeaders().GetHeaders() {
			if hv.GetKey() == ":status" {
				if code, err := strconv.Atoi(headerValue(hv)); err == nil {
					st.s.cfg.OnResponse(st.decision.Endpoints[0], code)
				}
				break
			}
		}
	}
	if st.explain && st.decision.Booking != nil {
		hr.Response = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			setHeader(DecisionHeader, st.decision.Explain())}}}
	}
	if h.GetEndOfStream() {
		st.finished = true
		st.release()
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: hr}})
}

func (st *stream) responseBody(b *extprocv3.HttpBody) error {
	if bk := st.decision.Booking; bk != nil {
		bk.Decoding()
	}
	if b.GetEndOfStream() {
		st.finished = true
		st.release()
	}
	if st.respMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return st.send(streamedBody(false, b.GetBody(), b.GetEndOfStream()))
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{}}})
}

// setHeader is an overwrite-or-add header mutation with a raw value.
func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// headerValue reads a header's value from raw_value, else value.
func headerValue(h *corev3.HeaderValue) string {
	if rv := h.GetRawValue(); len(rv) > 0 {
		return string(rv)
	}
	return h.GetValue()
}

// subsetHint reads the GIE subset hint: a list of "ip:port" strings or one comma-separated
// string. It returns nil when the hint is absent and an empty slice when it is empty.
func subsetHint(md *corev3.Metadata) []string {
	ns, ok := md.GetFilterMetadata()[SubsetNamespace]
	if !ok {
		return nil
	}
	v, ok := ns.GetFields()[SubsetHint]
	if !ok {
		return nil
	}
	out := []string{}
	add := func(s string) {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		add(k.StringValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			add(e.GetStringValue())
		}
	}
	return out
}

// newRequestID returns a random UUID (version 4).
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// stackReserve is how far a stream's worker grows its stack up front, while shallow. It
// would otherwise double its stack several times on the way down (to the decision, and to
// gRPC's receive and protobuf decoding), every time copying and adjusting each frame above:
// 7-15% of the server's CPU in extload's profiles (decision 1115).
const stackReserve = 12 << 10

var stackIndex int // always 0, never written: an index the compiler cannot see through keeps the reserving frames

// growStack grows the calling goroutine's stack to hold stackReserve more bytes.
//
//go:noinline
func growStack() byte {
	var b [stackReserve]byte
	return b[stackIndex]
}
