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

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/loadaware/loadaware-epp/picker"
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

// Picker is what the server needs of the decision engine.
type Picker interface {
	Pick(ctx context.Context, r picker.Request) (picker.Decision, error)
}

// Config configures a Server.
type Config struct {
	BodyMode      BodyMode // used when Envoy sends no protocol_config
	MaxBodyBytes  int64    // request bodies over this get 413; default DefaultMaxBodySize
	SessionHeader string   // default "x-user-id"
	Logger        *slog.Logger
	Registerer    prometheus.Registerer // nil: metrics are not registered
	OmitScores    bool                  // leave the candidates' scores and the reason out of the dynamic metadata
}

// Server implements envoy.service.ext_proc.v3.ExternalProcessor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	cfg     Config
	picker  Picker
	metrics *metrics

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
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, picker: p, metrics: m}, nil
}

// Process implements the ext_proc stream: one HTTP request.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := &stream{srv: srv, s: s, reqMode: s.cfg.BodyMode.envoy(), respMode: s.cfg.BodyMode.envoy()}
	defer func() {
		st.release()
		if s.streamDone != nil {
			s.streamDone()
		}
	}()
	err := st.run()
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

// stream is the state of one HTTP request's ext_proc conversation.
type stream struct {
	srv extprocv3.ExternalProcessor_ProcessServer
	s   *Server

	reqMode, respMode filterv3.ProcessingMode_BodySendMode
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
	decision          picker.Decision
	finished          bool // the response ended or an ImmediateResponse was sent
}

// run receives until the stream ends. A nil error means the conversation ended normally.
func (st *stream) run() error {
	for first := true; ; first = false {
		req, err := st.srv.Recv()
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
	if contentLength > st.s.cfg.MaxBodyBytes {
		return st.tooLarge()
	}
	// A request without a body, or a mode in which no body will reach us: decide now.
	if h.GetEndOfStream() || (st.reqMode != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && st.reqMode != filterv3.ProcessingMode_BUFFERED && st.reqMode != filterv3.ProcessingMode_BUFFERED_PARTIAL) {
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

func (st *stream) requestBody(b *extprocv3.HttpBody) error {
	if st.decided {
		return status.Error(codes.InvalidArgument, "ext_proc: request body arrived after the request was routed")
	}
	if int64(st.body.Len()+len(b.GetBody())) > st.s.cfg.MaxBodyBytes {
		return st.tooLarge()
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
	d, err := st.s.picker.Pick(st.srv.Context(), req)
	if err != nil {
		if st.srv.Context().Err() != nil {
			return st.srv.Context().Err()
		}
		return st.immediate(typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable", err.Error())
	}
	st.decision = d
	value := strings.Join(d.Endpoints, ",")
	set := []*corev3.HeaderValueOption{setHeader(DestinationHeader, value)}
	if st.generatedID {
		set = append(set, setHeader(RequestIDHeader, st.requestID))
	}
	md := routingMetadata(value, d, st.s.cfg.OmitScores)
	c := &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}
	resp := &extprocv3.ProcessingResponse{DynamicMetadata: md,
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: c}}}
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
	st.s.cfg.Logger.Info("request refused", "request_id", st.requestID, "status", int(code), "reason", msg)
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
