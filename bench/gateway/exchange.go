package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// exchange is one HTTP request and its ext_proc stream. It runs in phases, as Envoy's filter does:
// request headers and body to the picker, the picker's answers, the upstream request, then the
// upstream response headers and body through the picker to the client.
type exchange struct {
	g      *Gateway
	w      http.ResponseWriter
	rc     *http.ResponseController
	r      *http.Request
	start  time.Time
	out    Outcome
	abort  bool          // the response started and then failed: abort the client's stream
	wrote  bool          // response headers went to the client
	headAt time.Duration // when they did, from start

	ctx     context.Context // the stream's and the upstream request's context
	cancel  context.CancelFunc
	stream  extprocv3.ExternalProcessor_ProcessClient
	senders sync.WaitGroup // goroutines that send body chunks on the stream
	sendErr chan error     // the first error of a sender (reading its source or sending)
	upBody  io.ReadCloser  // the endpoint's response body, closed when the exchange ends
	upStart time.Time      // the request went to the endpoint
	upEnd   time.Time      // the endpoint's response body ended (set by its reader)

	req      message
	body     []byte // the request body after the picker's mutations
	open     failOpenState
	metaDest string // destination from dynamic metadata envoy.lb
	metaOK   bool
}

func newExchange(g *Gateway, w http.ResponseWriter, r *http.Request) *exchange {
	return &exchange{
		g: g, w: w, r: r,
		rc:      http.NewResponseController(w),
		start:   time.Now(),
		sendErr: make(chan error, 2),
		out:     Outcome{Method: r.Method, Path: r.URL.RequestURI()},
	}
}

func (ex *exchange) fullDuplex() bool { return ex.g.opts.Mode == FullDuplex }

// run drives the exchange. A clean end half-closes the stream and lets a background goroutine
// wait for the picker to end it; any failure cancels the stream at once, as Envoy resets it.
func (ex *exchange) run() {
	ex.ctx, ex.cancel = context.WithCancel(context.WithoutCancel(ex.r.Context()))
	stopWatch := context.AfterFunc(ex.r.Context(), ex.cancel)
	clean := ex.process()
	stopWatch()
	if !clean {
		ex.cancel()
	}
	if ex.upBody != nil {
		_ = ex.upBody.Close()
	}
	ex.senders.Wait()
	if !clean {
		return
	}
	ex.g.active.Add(1) // while ServeHTTP still holds its own count
	go ex.g.drain(ex.ctx, ex.stream, ex.cancel, ex.out.RequestID)
}

// drain half-closes the stream and reads until the picker ends it, bounded by DrainTimeout.
func (g *Gateway) drain(ctx context.Context, stream extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc, requestID string) {
	defer g.active.Done()
	defer cancel()
	t := time.AfterFunc(g.opts.DrainTimeout, cancel)
	defer t.Stop()
	if err := stream.CloseSend(); err != nil {
		return
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				g.log.Warn("gateway: the picker ended a finished ext_proc stream with an error; check the picker's log for this request",
					"request_id", requestID, "err", err)
			}
			return
		}
	}
}

// process runs the phases and reports whether the stream ended cleanly.
func (ex *exchange) process() bool {
	if !ex.requestPhase() {
		return false
	}
	if ex.out.Immediate {
		return true
	}
	resp, ok := ex.forward()
	if !ok {
		return false
	}
	if ex.fullDuplex() {
		return ex.streamResponse(resp)
	}
	return ex.bufferResponse(resp)
}

// requestPhase sends the request to the picker and applies its answers. It returns false on
// failure (the client has been answered or is gone) and sets out.Immediate when the picker
// answered the client itself.
func (ex *exchange) requestPhase() bool {
	g, r := ex.g, ex.r
	ex.req = message{method: r.Method, path: r.URL.RequestURI(), authority: r.Host, scheme: "http", header: r.Header.Clone()}
	if r.TLS != nil {
		ex.req.scheme = "https"
	}
	if r.ContentLength > 0 {
		ex.req.header.Set("Content-Length", strconv.FormatInt(r.ContentLength, 10))
	}
	if g.opts.GenerateRequestID && ex.req.header.Get("x-request-id") == "" {
		ex.req.header.Set("x-request-id", newRequestID())
	}
	hasBody := r.ContentLength != 0

	stream, err := g.client.Process(ex.ctx)
	if err != nil {
		return ex.streamFailed(err)
	}
	ex.stream = stream
	first := RequestHeadersMessage(g.opts.Mode, ex.req.method, ex.req.path, ex.req.authority, ex.req.scheme, ex.req.header, hasBody)
	if g.opts.SubsetHint != nil {
		first.MetadataContext = subsetHint(g.opts.SubsetHint)
	}
	sent := time.Now()
	if err := stream.Send(first); err != nil {
		return ex.sendFailed(err)
	}
	if hasBody && ex.fullDuplex() {
		ex.startSender(r.Body, r.ContentLength, RequestBodyMessage, nil)
	}

	gotHeaders := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			return ex.streamFailed(err)
		}
		ex.noteMetadata(resp)
		switch v := resp.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			return ex.immediate(v.ImmediateResponse)
		case *extprocv3.ProcessingResponse_RequestHeaders:
			if !ex.headersAnswer(&gotHeaders, "request", &ex.req, v.RequestHeaders.GetResponse().GetHeaderMutation()) {
				return false
			}
			if !hasBody || ex.fullDuplex() {
				ex.out.PickerTime = time.Since(sent)
			}
			if !hasBody {
				return ex.requestDone()
			}
			if !ex.fullDuplex() {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					return ex.fail(http.StatusBadRequest, fmt.Errorf("read the client's request body: %w", err), "")
				}
				ex.body = body
				if err := stream.Send(RequestBodyMessage(body, true)); err != nil {
					return ex.sendFailed(err)
				}
			}
		case *extprocv3.ProcessingResponse_RequestBody:
			if !gotHeaders {
				return ex.protocolError("a request body response before the request headers response")
			}
			cr := v.RequestBody.GetResponse()
			if err := ex.req.apply(cr.GetHeaderMutation()); err != nil {
				return ex.protocolError(err.Error())
			}
			if ex.fullDuplex() {
				sr := cr.GetBodyMutation().GetStreamedResponse()
				if sr == nil {
					return ex.protocolError("a full-duplex request body response without streamed_response")
				}
				ex.body = append(ex.body, sr.GetBody()...)
				if sr.GetEndOfStream() {
					return ex.requestDone()
				}
				continue
			}
			ex.body = mutateBody(ex.body, cr.GetBodyMutation())
			ex.out.PickerTime = time.Since(sent)
			return ex.requestDone()
		default:
			return ex.protocolError(fmt.Sprintf("an unexpected %T during the request", v))
		}
	}
}

// headersAnswer applies the picker's headers response of a phase ("request" or "response")
// to m and notes it in *got. A second one in the phase, or a mutation apply refuses, is a
// protocol error: it returns false with the client answered.
func (ex *exchange) headersAnswer(got *bool, phase string, m *message, mut *extprocv3.HeaderMutation) bool {
	if *got {
		return ex.protocolError("a second " + phase + " headers response")
	}
	*got = true
	if err := m.apply(mut); err != nil {
		return ex.protocolError(err.Error())
	}
	return true
}

// requestDone waits for the request-body sender (its last message has gone out: the picker
// answered end of stream) so the response phase may send.
func (ex *exchange) requestDone() bool {
	if err := ex.sendersErr(); err != nil {
		return ex.sourceFailed(err)
	}
	ex.out.RequestID = ex.req.header.Get("x-request-id")
	return true
}

// sendersErr waits for the body senders and returns the first one's error (nil: none failed).
func (ex *exchange) sendersErr() error {
	ex.senders.Wait()
	select {
	case err := <-ex.sendErr:
		return err
	default:
		return nil
	}
}

// forward sends the request to the endpoints of the picker's list in turn until one answers
// with response headers, as Envoy's router does with the shipped fallback route (retry_on
// connect-failure,refused-stream,reset; see localreply.go): an attempt that fails before
// the response headers (a refused or timed-out connect, or a connection reset or closed
// before the headers, such as a pooled connection the engine closed) moves to the next
// endpoint. When every endpoint failed, the response is Envoy's local reply (a 503), which
// then goes through the picker's response phase as the real response would. It returns
// false when the client has been answered with an error or went away.
func (ex *exchange) forward() (*http.Response, bool) {
	list, ok := ex.destinations()
	if !ok {
		return nil, false
	}
	ex.out.Destinations = list
	hdr := http.Header{}
	for k, vs := range ex.req.header {
		if lk := strings.ToLower(k); !hopByHop[lk] && lk != "content-length" {
			hdr[k] = vs
		}
	}
	var lastErr error
	for _, ep := range list {
		ex.out.Attempts++
		req, err := http.NewRequestWithContext(ex.ctx, ex.req.method, "http://"+ep+ex.req.path, bytes.NewReader(ex.body))
		if err != nil {
			lastErr = fmt.Errorf("endpoint %q is not a usable address: %w", ep, err)
			ex.g.log.Warn("gateway: skipping an unusable endpoint from the picker; check the picker's endpoint list", "endpoint", ep, "err", err)
			continue
		}
		req.Header = hdr.Clone()
		req.Host = ex.req.authority
		if len(ex.body) == 0 {
			req.Body, req.ContentLength = http.NoBody, 0
		}
		ex.upStart = time.Now()
		resp, err := ex.g.transport.RoundTrip(req)
		if err == nil {
			ex.out.Endpoint = ep
			ex.upBody = resp.Body
			return resp, true
		}
		lastErr = err
		if ex.ctx.Err() != nil {
			break
		}
		ex.g.log.Warn("gateway: endpoint failed before answering (refused connection or reset); trying the next one of the picker's list",
			"endpoint", ep, "request_id", ex.out.RequestID, "err", err)
	}
	if ex.ctx.Err() != nil {
		return nil, ex.fail(http.StatusServiceUnavailable, fmt.Errorf("the request to %v was cancelled: %w", list, lastErr), "")
	}
	err := fmt.Errorf("no endpoint of %v answered: %w", list, lastErr)
	ex.out.Err = err.Error()
	ex.g.log.Error("gateway: request failed; answering Envoy's local reply through the picker's response phase",
		"method", ex.req.method, "path", ex.req.path, "request_id", ex.out.RequestID, "status", http.StatusServiceUnavailable,
		"err", err, "what_to_do", "check that the engines are up and that the picker's endpoint list matches them")
	resp := localReply(lastErr)
	ex.upBody = resp.Body
	return resp, true
}

// destinations reads the picker's choice from the mutated headers and checks that dynamic
// metadata envoy.lb agrees.
func (ex *exchange) destinations() ([]string, bool) {
	dest := ex.req.header.Get(DestinationHeader)
	switch {
	case dest == "" && !ex.metaOK:
		return nil, ex.fail(http.StatusServiceUnavailable,
			errors.New("the picker named no endpoint (no "+DestinationHeader+" header or envoy.lb metadata)"),
			"check the picker's log for this request")
	case dest == "":
		dest = ex.metaDest
	case ex.metaOK && ex.metaDest != dest:
		return nil, ex.fail(http.StatusInternalServerError,
			fmt.Errorf("the picker answered two destinations: header %q, envoy.lb metadata %q", dest, ex.metaDest),
			"this is a picker bug: report it with the request id")
	}
	list := destinations(dest)
	if len(list) == 0 {
		return nil, ex.fail(http.StatusServiceUnavailable,
			fmt.Errorf("the picker's destination %q names no endpoint", dest), "check the picker's log for this request")
	}
	return list, true
}

func (ex *exchange) noteMetadata(resp *extprocv3.ProcessingResponse) {
	if v, ok := lbMetadata(resp.GetDynamicMetadata()); ok {
		ex.metaDest, ex.metaOK = v, true
	}
	if d, ok := decisionMetadata(resp.GetDynamicMetadata()); ok {
		ex.out.Decision = d
	}
}

// streamResponse is the full-duplex response phase: the endpoint's headers and body chunks go to
// the picker as they arrive, and what the picker streams back goes to the client, flushed chunk
// by chunk so server-sent events stream.
func (ex *exchange) streamResponse(resp *http.Response) bool {
	rm := message{status: resp.StatusCode, header: resp.Header.Clone()}
	hasBody := responseHasBody(ex.req.method, resp)
	ex.open.resp = resp
	if !ex.sendResponseHeaders(&rm, hasBody) {
		return false
	}
	if hasBody {
		ex.startSender(ex.teeResponse(resp.Body), resp.ContentLength, ResponseBodyMessage, &ex.upEnd)
	} else {
		ex.upEnd = time.Now()
	}
	gotHeaders := false
	for {
		pr, err := ex.stream.Recv()
		if err != nil {
			return ex.streamFailed(err)
		}
		switch v := pr.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			return ex.immediate(v.ImmediateResponse)
		case *extprocv3.ProcessingResponse_ResponseHeaders:
			if !ex.headersAnswer(&gotHeaders, "response", &rm, v.ResponseHeaders.GetResponse().GetHeaderMutation()) {
				return false
			}
			// The picker may change the body's length, so the client gets it chunked.
			ex.writeHead(&rm, -1)
			if !hasBody {
				return ex.responseDone()
			}
		case *extprocv3.ProcessingResponse_ResponseBody:
			if !gotHeaders {
				return ex.protocolError("a response body response before the response headers response")
			}
			sr := v.ResponseBody.GetResponse().GetBodyMutation().GetStreamedResponse()
			if sr == nil {
				return ex.protocolError("a full-duplex response body response without streamed_response")
			}
			ex.echoed(len(sr.GetBody()))
			if !ex.writeBody(sr.GetBody()) {
				return false
			}
			if sr.GetEndOfStream() {
				return ex.responseDone()
			}
		default:
			return ex.protocolError(fmt.Sprintf("an unexpected %T during the response", v))
		}
	}
}

// bufferResponse is the buffered response phase: headers, then the whole body in one message;
// the client gets the (possibly mutated) response once the picker has answered both.
func (ex *exchange) bufferResponse(resp *http.Response) bool {
	rm := message{status: resp.StatusCode, header: resp.Header.Clone()}
	hasBody := responseHasBody(ex.req.method, resp)
	if !ex.sendResponseHeaders(&rm, hasBody) {
		return false
	}
	pr, ok := ex.recvExpect("response headers")
	if !ok || ex.out.Immediate {
		return ok
	}
	hr, isHeaders := pr.GetResponse().(*extprocv3.ProcessingResponse_ResponseHeaders)
	if !isHeaders {
		return ex.protocolError(fmt.Sprintf("%T where the response headers response belongs", pr.GetResponse()))
	}
	if err := rm.apply(hr.ResponseHeaders.GetResponse().GetHeaderMutation()); err != nil {
		return ex.protocolError(err.Error())
	}
	var body []byte
	if hasBody {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return ex.fail(http.StatusBadGateway, fmt.Errorf("read the response body of %s: %w", ex.out.Endpoint, err),
				"check the engine's log")
		}
		ex.upEnd = time.Now()
		body = b
		if err := ex.stream.Send(ResponseBodyMessage(body, true)); err != nil {
			return ex.sendFailed(err)
		}
		pr, ok := ex.recvExpect("response body")
		if !ok || ex.out.Immediate {
			return ok
		}
		br, isBody := pr.GetResponse().(*extprocv3.ProcessingResponse_ResponseBody)
		if !isBody {
			return ex.protocolError(fmt.Sprintf("%T where the response body response belongs", pr.GetResponse()))
		}
		cr := br.ResponseBody.GetResponse()
		if err := rm.apply(cr.GetHeaderMutation()); err != nil {
			return ex.protocolError(err.Error())
		}
		body = mutateBody(body, cr.GetBodyMutation())
	} else {
		ex.upEnd = time.Now()
	}
	ex.writeHead(&rm, len(body))
	if !ex.writeBody(body) {
		return false
	}
	return ex.responseDone()
}

func (ex *exchange) sendResponseHeaders(rm *message, hasBody bool) bool {
	if err := ex.stream.Send(ResponseHeadersMessage(rm.status, rm.header, hasBody)); err != nil {
		return ex.sendFailed(err)
	}
	return true
}

// recvExpect receives one answer in buffered mode, handling a stream error and an immediate
// response (then out.Immediate is set and the returned message is nil).
func (ex *exchange) recvExpect(what string) (*extprocv3.ProcessingResponse, bool) {
	pr, err := ex.stream.Recv()
	if err != nil {
		return nil, ex.streamFailed(fmt.Errorf("waiting for the %s response: %w", what, err))
	}
	if ir, ok := pr.GetResponse().(*extprocv3.ProcessingResponse_ImmediateResponse); ok {
		return nil, ex.immediate(ir.ImmediateResponse)
	}
	return pr, true
}

// responseDone waits for the response-body sender and records the upstream time.
func (ex *exchange) responseDone() bool {
	if err := ex.sendersErr(); err != nil {
		return ex.sourceFailed(err)
	}
	ex.out.Upstream = ex.upEnd.Sub(ex.upStart)
	return true
}

func mutateBody(body []byte, m *extprocv3.BodyMutation) []byte {
	switch v := m.GetMutation().(type) {
	case *extprocv3.BodyMutation_Body:
		return v.Body
	case *extprocv3.BodyMutation_ClearBody:
		if v.ClearBody {
			return nil
		}
	}
	return body
}

func responseHasBody(method string, resp *http.Response) bool {
	if method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return false
	}
	return resp.ContentLength != 0
}

// immediate answers the client with the picker's ImmediateResponse.
func (ex *exchange) immediate(ir *extprocv3.ImmediateResponse) bool {
	if ex.wrote {
		return ex.protocolError("an immediate response after the response started")
	}
	status := int(ir.GetStatus().GetCode())
	switch {
	case status == 0:
		status = http.StatusOK
	case status < 200 || status > 599:
		status = http.StatusInternalServerError
	}
	m := message{status: status, header: http.Header{}}
	if err := m.apply(ir.GetHeaders()); err != nil {
		return ex.protocolError(err.Error())
	}
	ex.out.Immediate = true
	ex.out.RequestID = ex.req.header.Get("x-request-id")
	ex.writeHead(&m, len(ir.GetBody()))
	return ex.writeBody(ir.GetBody())
}

// writeHead sends the response headers to the client; contentLength < 0 leaves it unset.
func (ex *exchange) writeHead(m *message, contentLength int) {
	h := ex.w.Header()
	for k, vs := range m.header {
		if lk := strings.ToLower(k); !hopByHop[lk] && lk != "content-length" {
			h[k] = vs
		}
	}
	if contentLength >= 0 {
		h.Set("Content-Length", strconv.Itoa(contentLength))
	}
	ex.w.WriteHeader(m.status)
	ex.wrote = true
	ex.out.Status = m.status
	ex.headAt = time.Since(ex.start)
	ex.flush()
}

// writeBody writes and flushes b to the client; false means the client is gone.
func (ex *exchange) writeBody(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	if _, err := ex.w.Write(b); err != nil {
		ex.clientGone(err)
		return false
	}
	if ex.out.TTFB == 0 {
		ex.out.TTFB = time.Since(ex.start)
	}
	ex.flush()
	return true
}

func (ex *exchange) flush() {
	if err := ex.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		ex.clientGone(err)
	}
}
