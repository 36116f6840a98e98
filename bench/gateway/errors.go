package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// sourceError is a failure to read a body the gateway was relaying: the client's request body or
// the endpoint's response body. status is what the client gets if nothing was written yet.
type sourceError struct {
	status int
	err    error
}

func (e *sourceError) Error() string { return e.err.Error() }

// startSender streams src to the picker in chunks of at most ChunkSize as the data arrives,
// without waiting for answers (full-duplex). length is src's length, or -1 when unknown: with a
// known length the last data chunk carries end_of_stream, otherwise an empty final message does,
// as Envoy does for content-length and chunked bodies. A nil eof is left alone; otherwise the
// time the source ended is stored there. A read failure cancels the stream and is reported on
// sendErr; a send failure just stops (the receiver sees the stream's error).
func (ex *exchange) startSender(src io.Reader, length int64, wrap func([]byte, bool) *extprocv3.ProcessingRequest, eof *time.Time) {
	status, what := http.StatusBadRequest, "the client's request body"
	if eof != nil {
		status, what = http.StatusBadGateway, "the response body of "+ex.out.Endpoint
	}
	ex.senders.Add(1)
	go func() {
		defer ex.senders.Done()
		bp := ex.g.chunks.Get().(*[]byte)
		defer ex.g.chunks.Put(bp)
		buf := *bp
		var sent int64
		for {
			n, err := src.Read(buf)
			if err != nil && !errors.Is(err, io.EOF) {
				ex.sendErr <- &sourceError{status: status, err: fmt.Errorf("read %s: %w", what, err)}
				ex.cancel()
				return
			}
			sent += int64(n)
			end := err != nil || (length >= 0 && sent >= length)
			if n == 0 && !end {
				continue
			}
			if end && eof != nil {
				*eof = time.Now()
			}
			// A fresh slice per message: gRPC may keep a sent message for stats handlers.
			if ex.stream.Send(wrap(append([]byte(nil), buf[:n]...), end)) != nil || end {
				return
			}
		}
	}()
}

// streamFailed handles a failed Recv (or a failed stream start): the client went away, a relayed
// body failed, or the picker's stream broke (a 500, as Envoy with failure_mode_allow=false).
func (ex *exchange) streamFailed(err error) bool {
	select {
	case serr := <-ex.sendErr:
		return ex.sourceFailed(serr)
	default:
	}
	if ex.g.opts.FailOpen && ex.r.Context().Err() == nil && !ex.out.ClientGone {
		if done, ok := ex.failOpen(err); done {
			return ok
		}
	}
	return ex.fail(http.StatusInternalServerError, fmt.Errorf("ext_proc stream to the picker failed: %w", err),
		"check that the picker is running and serves envoy.service.ext_proc.v3.ExternalProcessor at "+ex.g.target+
			" (failure_mode_allow=false turns a picker failure into a 500)")
}

// sendFailed handles a failed Send from the receiving goroutine: io.EOF means the picker ended the
// stream, and the next Recv says how (possibly with an immediate response still queued).
func (ex *exchange) sendFailed(err error) bool {
	if !errors.Is(err, io.EOF) {
		return ex.streamFailed(err)
	}
	for {
		pr, rerr := ex.stream.Recv()
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				rerr = errors.New("the picker ended the stream before answering")
			}
			return ex.streamFailed(rerr)
		}
		if ir, ok := pr.GetResponse().(*extprocv3.ProcessingResponse_ImmediateResponse); ok {
			return ex.immediate(ir.ImmediateResponse)
		}
	}
}

func (ex *exchange) sourceFailed(err error) bool {
	var se *sourceError
	if errors.As(err, &se) {
		return ex.fail(se.status, se.err, "check the client and the engine; the request was abandoned")
	}
	return ex.fail(http.StatusBadGateway, err, "")
}

func (ex *exchange) protocolError(what string) bool {
	return ex.fail(http.StatusInternalServerError,
		fmt.Errorf("the picker broke the ext_proc protocol: it sent %s", what),
		"this is a picker bug: report it with the request id and the picker's log")
}

// clientGone records that the client went away; the stream is then cancelled.
func (ex *exchange) clientGone(err error) {
	if ex.out.Err == "" {
		ex.out.Err = fmt.Sprintf("the client went away: %v", err)
	}
	ex.out.ClientGone = true
}

// fail ends the exchange with an error: the client gets status and a one-line body, or, when the
// response already started, an aborted stream. It returns false (the stream is then cancelled).
func (ex *exchange) fail(status int, err error, whatToDo string) bool {
	if ex.r.Context().Err() != nil || ex.out.ClientGone {
		ex.clientGone(err)
		return false
	}
	ex.out.Err = err.Error()
	level := slogLevel(status)
	ex.g.log.Log(ex.ctx, level, "gateway: request failed", "method", ex.req.method, "path", ex.req.path,
		"request_id", ex.req.header.Get("x-request-id"), "endpoint", ex.out.Endpoint, "status", status,
		"err", err, "what_to_do", whatToDo)
	if ex.wrote {
		ex.abort = true
		return false
	}
	ex.out.Status = status
	ex.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	ex.w.WriteHeader(status)
	ex.wrote = true
	ex.headAt = time.Since(ex.start)
	_, _ = io.WriteString(ex.w, "gateway: "+err.Error()+"\n")
	return false
}
