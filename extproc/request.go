package extproc

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

func (st *stream) requestHeaders(h *extprocv3.HttpHeaders) error {
	var contentLength int64 = -1
	// A value is made a string only for the headers read: Envoy sends a dozen or more
	// that are not, and converting each was an allocation per header per request.
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch strings.ToLower(hv.GetKey()) {
		case ":path":
			st.path = headerValue(hv)
		case RequestIDHeader:
			st.requestID = headerValue(hv)
		case st.s.cfg.SessionHeader:
			st.session = headerValue(hv)
		case ExplainHeader:
			v := headerValue(hv)
			st.explain = v == "1" || strings.EqualFold(v, "true")
		case "authorization":
			st.authorization = headerValue(hv)
		case "content-length":
			if n, err := strconv.ParseInt(headerValue(hv), 10, 64); err == nil {
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
		outcome := "refused"
		if st.explain {
			outcome = "given"
		}
		st.s.metrics.explain.WithLabelValues(outcome).Inc()
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
			st.s.metrics.bodyless.inc(st.reqMode)
		}
		return st.decide(nil, false, inHeaders)
	}
	if st.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return nil // hold the headers response until the body ends
	}
	return st.send(continueRequestHeaders)
}

func (st *stream) requestBody(b *extprocv3.HttpBody) error {
	if st.phase != readingBody { // routed
		if !readsBody(st.reqMode) {
			// STREAMED (or a mode this build does not know): routed at the headers on load
			// alone; Envoy still sends every chunk and waits for one answer each.
			return st.send(continueRequestBody)
		}
		return status.Error(codes.InvalidArgument, "ext_proc: request body arrived after the request was routed")
	}
	if int64(st.chunked+len(b.GetBody())) > st.s.cfg.MaxBodyBytes {
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
	if st.chunked == 0 && (b.GetEndOfStream() || st.reqMode != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED) {
		st.whole = b.GetBody() // the body in one frame, routed in this message: no copy
	} else if len(b.GetBody()) > 0 {
		// Kept as a copy of exactly its bytes (the received buffer goes back to the pool
		// when this message is done): the budget holds exactly what the stream holds, with
		// no doubling buffer and no copies left to the collector while the body grows.
		st.chunks, st.chunked = append(st.chunks, bytes.Clone(b.GetBody())), st.chunked+len(b.GetBody())
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
	if st.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && st.phase == readingBody {
		// The body ended with trailers rather than an end_of_stream body chunk.
		if err := st.decideFullDuplex(false); err != nil || st.phase == answered {
			return err
		}
	}
	return st.send(continueRequestTrailers)
}

// decideFullDuplex routes on the buffered body, then sends the held headers response and
// the body back in chunks; eos says whether the last chunk ends the request stream.
func (st *stream) decideFullDuplex(eos bool) error {
	body := st.bodyBytes()
	err := st.decide(body, true, inHeaders)
	if err != nil || st.phase == answered {
		return err
	}
	for off := 0; off < len(body) || off == 0; off += MaxStreamedChunk {
		end := min(off+MaxStreamedChunk, len(body))
		if err := st.sendStreamed(true, body[off:end], eos && end == len(body)); err != nil {
			return err
		}
		if end == len(body) {
			break
		}
	}
	return nil
}

// bodyBytes is the request body received so far, in one slice: the frames are joined
// once, when the request is routed.
func (st *stream) bodyBytes() []byte {
	if st.whole != nil || len(st.chunks) == 0 {
		return st.whole
	}
	if len(st.chunks) > 1 {
		st.chunks = [][]byte{bytes.Join(st.chunks, nil)}
	}
	return st.chunks[0]
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
	req := picker.Request{RequestID: st.requestID, Path: st.path, Session: st.session, Subset: st.subset, Explain: st.explain}
	var kept *[]uint32 // the server's array the ids are decoded into, if it had one
	if hasBody {
		var ids []uint32
		if kept, _ = st.s.idArrays.Get().(*[]uint32); kept != nil {
			ids = *kept
		}
		b, err := parseBody(st.path, body, ids)
		if err != nil {
			st.s.keepIDs(kept, nil)
			return st.immediate(typev3.StatusCode_BadRequest, "BadRequest", err.Error())
		}
		req.Model, req.Prompt, req.Tokens, req.CacheSalt = b.Model, b.Prompt, b.Tokens, b.CacheSalt
		if b.Chat {
			req.ChatBody = body
		}
	}
	d, _ := st.s.decisions.Get().(*picker.Decision)
	if d == nil {
		d = new(picker.Decision)
	}
	st.decision, st.decidedAt = d, time.Now()
	err := st.s.picker.PickInto(st.srv.Context(), req, d)
	if hasBody {
		// picker.Request.Tokens is read only until PickInto returns: the array is the
		// server's again, for the next request with ids.
		st.s.keepIDs(kept, req.Tokens)
	}
	if err != nil {
		if d.Booking != nil { // Pick books nothing when it fails; should that change, nothing leaks
			d.Booking.Release()
			d.Booking = nil
		}
		if st.srv.Context().Err() != nil {
			return st.srv.Context().Err()
		}
		return st.immediate(typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable", err.Error())
	}
	if err := st.on(decided); err != nil {
		return err // the booking is released when the worker ends
	}
	var generated string
	if st.generatedID {
		generated = st.requestID
	}
	a, _ := st.s.answers.Get().(*routingAnswer)
	if a == nil {
		a = new(routingAnswer)
	}
	err = st.send(a.build(strings.Join(d.Endpoints, ","), generated, d, st.s.cfg.OmitScores, answerInBody))
	st.s.answers.Put(a)
	return err
}

// maxKeptIDs bounds the token-id arrays the server keeps between decisions (64 KiB each,
// Server.idArrays): a prompt of up to about 16k ids is decoded without allocating, a
// longer one into an array of its own, as before. An array is overwritten by each
// request's ids.
const maxKeptIDs = 1 << 14

// keepIDs puts back into idArrays the larger of the array kept (taken from idArrays, or
// nil) and the array ids was decoded into, if that is at most maxKeptIDs; the other is
// left to the collector. Nothing may read either array afterwards.
func (s *Server) keepIDs(kept *[]uint32, ids []uint32) {
	if kept == nil {
		if c := cap(ids); c == 0 || c > maxKeptIDs {
			return
		}
		kept = new([]uint32)
	}
	if c := cap(ids); c > cap(*kept) && c <= maxKeptIDs {
		*kept = ids[:0]
	}
	s.idArrays.Put(kept)
}

func (st *stream) tooLarge() error {
	return st.immediate(typev3.StatusCode_PayloadTooLarge, "BadRequest",
		fmt.Sprintf("the request body is over the limit of %d bytes (--max-body-bytes)", st.s.cfg.MaxBodyBytes))
}

// immediate answers the client directly with an error and ends the conversation.
func (st *stream) immediate(code typev3.StatusCode, kind, msg string) error {
	if err := st.on(sentImmediate); err != nil {
		return err
	}
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
	// 8-4-4-4-12 hex digits, written in place: fmt.Sprintf took seven allocations.
	var id [36]byte
	hex.Encode(id[0:8], b[0:4])
	hex.Encode(id[9:13], b[4:6])
	hex.Encode(id[14:18], b[6:8])
	hex.Encode(id[19:23], b[8:10])
	hex.Encode(id[24:36], b[10:16])
	id[8], id[13], id[18], id[23] = '-', '-', '-', '-'
	return string(id[:])
}
