package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

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
	ex.senders.Wait()
	select {
	case err := <-ex.sendErr:
		return ex.sourceFailed(err)
	default:
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
