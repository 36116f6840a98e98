package extproc

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/protobuf/proto"
)

// work runs the stream's conversation and then gives back what it holds: its place among
// the streams, its body bytes, its booking and its Decision. It holds st.mu except while it
// waits in Recv, so watch sees the stream only between messages.
func (st *stream) work() {
	growStack()
	st.mu.Lock()
	err := st.run()
	s := st.s
	s.streams.leave()
	s.leaveAdmitted(st.srv.Context())
	st.freeBody()
	st.release()
	if st.decision != &noDecision {
		st.decision.Booking = nil // released above; PickInto overwrites the rest
		s.decisions.Put(st.decision)
	}
	if perr := st.on(workerDone); err == nil {
		err = perr
	}
	st.mu.Unlock()
	if s.streamDone != nil {
		s.streamDone()
	}
	st.done <- err
}

// recv receives the stream's next message with st.mu released, so that watch may time
// the stream out meanwhile; with a Pacer, a body chunk past Limits.UnpacedBodyBytes is
// processed only after the pacer's Delay. The Pacer is asked for once, when the stream's
// bodies first go past that bound. recv returns errTimedOut when watch timed the stream out.
//
// The message is st.msg, whose bytes fields may point into the buffer it was received in
// (decode.go): the caller releases it once done with it; recv has released it when it
// returns an error.
func (st *stream) recv() (*extprocv3.ProcessingRequest, error) {
	st.mu.Unlock()
	err := st.srv.RecvMsg(&st.msg)
	st.mu.Lock()
	if st.phase == timedOut {
		st.msg.release()
		return nil, errTimedOut
	}
	if err != nil {
		st.msg.release()
		return nil, err
	}
	req := st.msg.ProcessingRequest
	if st.phase.reading() { // only then does watch read it: no phase leads back to reading
		st.lastRecv = time.Now()
	}
	n := len(req.GetRequestBody().GetBody()) + len(req.GetResponseBody().GetBody())
	if st.s.cfg.Received != nil && n > 0 {
		st.s.cfg.Received(st.srv.Context(), st.msg.wireSize())
	}
	if st.s.cfg.Pacer != nil && n > 0 {
		if st.pacedBytes += int64(n); st.pacedBytes > st.s.cfg.Limits.UnpacedBodyBytes {
			if !st.askedPacer {
				st.pacer, st.askedPacer = st.s.cfg.Pacer(st.srv.Context()), true
			}
			if st.pacer != nil {
				st.pace(st.pacer.Delay())
			}
		}
	}
	return req, nil
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
	mu        sync.Mutex
	done      chan error  // the worker's result, sent once it has given back what it held
	idleTimer *time.Timer // watch's idle timeout; kept with the stream for its next use
	phase     phase       // where the conversation stands; changed only by on (watch: idle)
	lastRecv  time.Time   // when the last message arrived while reading (read by watch)

	pacer      Pacer // the connection's, once askedPacer
	askedPacer bool
	pacedBytes int64 // request and response body bytes received, for the pacer

	reqMode, respMode filterv3.ProcessingMode_BodySendMode
	refuse            string // non-empty: answer 503 at the headers (over a limit)
	held              int64  // request body bytes taken from the server's budget
	authorization     string
	quiet             bool // a refusal logged by overloaded, not per request
	path              string
	requestID         string
	generatedID       bool
	session           string
	explain           bool
	subset            []string
	msg               received         // the message being handled; released before the next is received
	chunks            [][]byte         // the request body's frames (copies), when it came in several
	chunked           int              // the length of chunks' bytes together
	whole             []byte           // the request body, when it came in one frame: in msg's buffer
	decision          *picker.Decision // &noDecision until decide takes one from the pool
	decidedAt         time.Time        // when decide routed the request
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
		end, err := st.handle(req, first)
		st.whole = nil // it points into the message's buffer
		st.msg.release()
		if err != nil || end {
			return err
		}
	}
}

// handle handles one message, req; end reports that the conversation is over.
func (st *stream) handle(req *extprocv3.ProcessingRequest, first bool) (end bool, err error) {
	if first && req.GetProtocolConfig() != nil {
		pc := req.GetProtocolConfig()
		st.reqMode, st.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
	}
	if md := req.GetMetadataContext(); md != nil && st.subset == nil {
		st.subset = subsetHint(md)
	}
	ev, ok := messageEvent(req)
	if !ok {
		return false, errUnknownMessage
	}
	if err := st.on(ev); err != nil {
		return false, err
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
		err = st.send(continueResponseTrailers)
	}
	if err != nil {
		return false, err
	}
	if !st.phase.reading() {
		st.freeBody() // routed or answered: the body is no longer needed
	}
	// An ImmediateResponse (or a response before routing) ends the conversation.
	return st.phase.over() && st.decision.Booking == nil, nil
}

// messageEvent is the event of Envoy's message req; false for a message that carries none
// of the six.
func messageEvent(req *extprocv3.ProcessingRequest) (event, bool) {
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return gotRequestHeaders, true
	case *extprocv3.ProcessingRequest_RequestBody:
		return gotRequestBody, true
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return gotRequestTrailers, true
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return responseEvent(r.ResponseHeaders.GetEndOfStream()), true
	case *extprocv3.ProcessingRequest_ResponseBody:
		return responseEvent(r.ResponseBody.GetEndOfStream()), true
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return gotResponse, true
	}
	return 0, false
}

func responseEvent(eos bool) event {
	if eos {
		return gotResponseEnd
	}
	return gotResponse
}

// send sends r, an answer: a *extprocv3.ProcessingResponse, or an answer that also encodes
// itself (grpcbuf.Encoder: routingAnswer, encodedResponse), whose messages are a
// ProcessingResponse's.
func (st *stream) send(r proto.Message) error {
	if err := st.srv.SendMsg(r); err != nil {
		return fmt.Errorf("%w: %w", errSend, err)
	}
	return nil
}

// freeBody drops the buffered request body and gives its bytes back to the budget.
func (st *stream) freeBody() {
	st.s.bytes.give(st.held)
	st.held = 0
	st.chunks, st.chunked = nil, 0
	st.whole = nil
}

// release ends the request's booking; safe to call any number of times.
func (st *stream) release() {
	if b := st.decision.Booking; b != nil && b.Release() {
		st.s.metrics.released.Inc()
	}
}

// stackReserve is how far a stream's worker grows its stack up front, while shallow. It
// would otherwise double its stack several times on the way down (to the decision, and to
// gRPC's receive and protobuf decoding), every time copying and adjusting each frame above:
// 7-15% of the server's CPU in extload's profiles (decision 1115).
const stackReserve = 12 << 10

var stackIndex int // always 0, never written: an index the compiler cannot see through keeps the reserving frames

// growStack grows the calling goroutine's stack to hold stackReserve more bytes without
// writing them: the reserve is a local of a branch never taken (stackIndex is 0), so the
// frame holds it and the prologue grows the stack for it, but nothing clears it. Clearing
// it, as a plain local is cleared, touched 12 KiB of a new stack per stream (decision 1196).
//
//go:noinline
func growStack() byte {
	if stackIndex != 0 {
		var b [stackReserve]byte
		return readReserve(b[:])
	}
	return 0
}

// readReserve keeps growStack's reserve in its frame: the compiler cannot drop a local
// that a call reads.
//
//go:noinline
func readReserve(b []byte) byte { return b[stackIndex] }
