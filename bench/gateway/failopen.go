package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxFailOpenBody bounds the client body held for FailOpen (the picker's default limit).
const maxFailOpenBody = 16 << 20

// failOpenState is what an exchange keeps to carry a request on without the picker.
type failOpenState struct {
	raw  []byte         // the client's request body as received (FailOpen only)
	resp *http.Response // the endpoint's response (full-duplex mode), once it started

	mu      sync.Mutex
	pending []byte // response bytes sent to the picker and not yet echoed to the client
	tee     bool
}

// readRawBody reads the client's body whole so that it can be sent again without the
// picker; false means the client has been answered.
func (ex *exchange) readRawBody() bool {
	if ex.r.Body == nil || ex.r.ContentLength == 0 {
		return true
	}
	b, err := io.ReadAll(io.LimitReader(ex.r.Body, maxFailOpenBody+1))
	if err != nil {
		ex.req = message{method: ex.r.Method, path: ex.r.URL.RequestURI(), header: ex.r.Header.Clone()}
		return ex.fail(http.StatusBadRequest, fmt.Errorf("read the client's request body: %w", err), "")
	}
	if len(b) > maxFailOpenBody {
		ex.req = message{method: ex.r.Method, path: ex.r.URL.RequestURI(), header: ex.r.Header.Clone()}
		return ex.fail(http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", maxFailOpenBody), "send a smaller body")
	}
	ex.open.raw = b
	ex.r.Body = io.NopCloser(bytes.NewReader(b))
	return true
}

// teeResponse keeps what the response sender reads until the picker echoes it (FailOpen).
func (ex *exchange) teeResponse(body io.Reader) io.Reader {
	if !ex.g.opts.FailOpen || !ex.fullDuplex() {
		return body
	}
	ex.open.tee = true
	return teeReader{ex: ex, r: body}
}

type teeReader struct {
	ex *exchange
	r  io.Reader
}

func (t teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.ex.open.mu.Lock()
		t.ex.open.pending = append(t.ex.open.pending, p[:n]...)
		t.ex.open.mu.Unlock()
	}
	return n, err
}

// echoed drops n bytes the picker echoed from the pending response bytes. The picker
// passes response bodies through unchanged, so what it echoed is the front of pending.
func (ex *exchange) echoed(n int) {
	if !ex.open.tee {
		return
	}
	ex.open.mu.Lock()
	ex.open.pending = ex.open.pending[min(n, len(ex.open.pending)):]
	ex.open.mu.Unlock()
}

// failOpen carries the request on after the picker's stream failed with err. done is
// false when it cannot (the caller then fails the request as with failure_mode_allow
// false); ok is false either way: the stream did not end cleanly, and the exchange is over.
func (ex *exchange) failOpen(err error) (done, ok bool) {
	switch {
	case ex.open.resp == nil && ex.upBody == nil && !ex.wrote && len(ex.g.opts.Fallback) > 0:
		ex.openRequest(err)
		return true, false
	case ex.open.resp != nil && ex.fullDuplex():
		ex.openResponse(err)
		return true, false
	}
	return false, false
}

// openRequest sends the client's request to the next Fallback engine, as Envoy's
// fallback route does for a request the picker did not route, and relays its response.
func (ex *exchange) openRequest(cause error) bool {
	_ = ex.sendersErr() // a sender stops at its first failed send; cause says why
	fb := ex.g.opts.Fallback
	ep := fb[int(ex.g.fallbackN.Add(1)-1)%len(fb)]
	ex.out.FailedOpen, ex.out.Destinations = "request", []string{ep}
	ex.out.RequestID = ex.req.header.Get("x-request-id")
	ex.g.log.Warn("gateway: the picker's stream failed before it routed the request; sending it to a fallback engine (failure_mode_allow)",
		"request_id", ex.out.RequestID, "endpoint", ep, "err", cause)
	req, err := http.NewRequestWithContext(ex.ctx, ex.r.Method, "http://"+ep+ex.r.URL.RequestURI(), bytes.NewReader(ex.open.raw))
	if err != nil {
		return ex.fail(http.StatusServiceUnavailable, fmt.Errorf("fallback endpoint %q: %w", ep, err), "check the gateway's fallback engines")
	}
	for k, vs := range ex.req.header {
		if lk := strings.ToLower(k); !hopByHop[lk] && lk != "content-length" && lk != DestinationHeader {
			req.Header[k] = vs
		}
	}
	req.Host = ex.r.Host
	if len(ex.open.raw) == 0 {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	ex.out.Attempts++
	ex.upStart = time.Now()
	resp, err := ex.g.transport.RoundTrip(req)
	if err != nil {
		return ex.fail(http.StatusServiceUnavailable, fmt.Errorf("fallback endpoint %s: %w", ep, err), "check that the engines are up")
	}
	ex.out.Endpoint, ex.upBody = ep, resp.Body
	m := message{status: resp.StatusCode, header: resp.Header.Clone()}
	ex.writeHead(&m, -1)
	return ex.relay(resp.Body)
}

// openResponse continues the endpoint's response to the client without the picker: the
// bytes the picker had not echoed yet, then the rest of the body as it arrives.
func (ex *exchange) openResponse(cause error) bool {
	_ = ex.sendersErr() // the sender stops at its first failed send; cause says why
	ex.out.FailedOpen = "response"
	ex.g.log.Warn("gateway: the picker's stream failed during the response; continuing it unprocessed (failure_mode_allow)",
		"request_id", ex.out.RequestID, "endpoint", ex.out.Endpoint, "err", cause)
	if !ex.wrote {
		m := message{status: ex.open.resp.StatusCode, header: ex.open.resp.Header.Clone()}
		ex.writeHead(&m, -1)
	}
	ex.open.mu.Lock()
	rest := ex.open.pending
	ex.open.pending = nil
	ex.open.mu.Unlock()
	if !ex.writeBody(rest) {
		return false
	}
	if !ex.upEnd.IsZero() { // the sender had read the whole body
		ex.out.Upstream = ex.upEnd.Sub(ex.upStart)
		return true
	}
	return ex.relay(ex.open.resp.Body)
}

// relay copies body to the client, flushing each read, and records the upstream time.
func (ex *exchange) relay(body io.Reader) bool {
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 && !ex.writeBody(buf[:n]) {
			return false
		}
		if err == io.EOF {
			ex.upEnd = time.Now()
			ex.out.Upstream = ex.upEnd.Sub(ex.upStart)
			return true
		}
		if err != nil {
			return ex.fail(http.StatusBadGateway, fmt.Errorf("read the response body of %s: %w", ex.out.Endpoint, err), "check the engine's log")
		}
	}
}
