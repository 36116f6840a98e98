package extproc

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// phase is where one stream's conversation stands. A stream changes phase only through
// phase.next, whose table (transitions) holds every legal move; the handlers report
// events and read the phase, they keep no flags of their own.
//
//	awaitingHeaders --request headers--> readingBody --decided--> forwarding --response end--> responded
//	      |                                  |  \--response end (a local reply before routing)--> responded
//	      |                                  \--ImmediateResponse--> answered
//	      \--idle timeout (also from readingBody)--> timedOut (the 408 is sent in it)
//	every phase but ended --worker done--> ended
type phase uint8

// The phases. The zero value is no phase: it marks the table's illegal moves.
const (
	awaitingHeaders phase = iota + 1 // nothing received yet
	readingBody                      // the request headers arrived; the body is read before routing
	forwarding                       // the picker decided and the routing answer is sent: the response passes through
	responded                        // the response ended (end_of_stream on its headers or body)
	answered                         // an ImmediateResponse was sent: the conversation is over
	timedOut                         // watch answered 408 while the request was read
	ended                            // the worker gave back everything the stream held
	numPhases
)

var phaseNames = [numPhases]string{awaitingHeaders: "awaiting-headers", readingBody: "reading-body", forwarding: "forwarding",
	responded: "responded", answered: "answered", timedOut: "timed-out", ended: "ended"}

func (p phase) String() string {
	if p < numPhases && phaseNames[p] != "" {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// reading reports whether the request is still being read before routing: the only
// phases in which the idle timeout applies.
func (p phase) reading() bool { return p == awaitingHeaders || p == readingBody }

// over reports whether the conversation has nothing more to answer once the booking is
// released: the response ended, or an ImmediateResponse ended the request.
func (p phase) over() bool { return p == responded || p == answered }

// event is what moves a stream from one phase to the next: a message from Envoy, or
// something the stream or its watcher did.
type event uint8

// The events.
const (
	gotRequestHeaders  event = iota // request headers
	gotRequestBody                  // a request body chunk
	gotRequestTrailers              // request trailers
	gotResponse                     // response headers, body chunk or trailers not ending the response
	gotResponseEnd                  // response headers or body chunk with end_of_stream
	decided                         // the picker chose; the routing answer follows
	sentImmediate                   // an ImmediateResponse is sent
	idle                            // watch: nothing arrived for the idle timeout while reading
	workerDone                      // the worker gave back what the stream held
	numEvents
)

var eventNames = [numEvents]string{gotRequestHeaders: "request headers", gotRequestBody: "request body",
	gotRequestTrailers: "request trailers", gotResponse: "response", gotResponseEnd: "response end",
	decided: "decision", sentImmediate: "immediate response", idle: "idle timeout", workerDone: "worker done"}

func (e event) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// fromEnvoy reports whether e is a message Envoy sent (as opposed to the stream's own doing).
func (e event) fromEnvoy() bool { return e <= gotResponseEnd }

// transitions is the whole state machine: transitions[p][e] is the phase after event e in
// phase p, or 0 when e may not happen in p.
//
// Once the request is routed, request body chunks and trailers still arrive in the modes
// that route at the headers (STREAMED, NONE), and the handlers decide what a chunk in a
// reading mode means; response messages pass through in any phase after the headers,
// including before routing (Envoy's own local reply, say a timeout, while the body is read).
var transitions = [numPhases][numEvents]phase{
	awaitingHeaders: {gotRequestHeaders: readingBody, idle: timedOut, workerDone: ended},
	readingBody: {gotRequestBody: readingBody, gotRequestTrailers: readingBody, gotResponse: readingBody,
		gotResponseEnd: responded, decided: forwarding, sentImmediate: answered, idle: timedOut, workerDone: ended},
	forwarding: {gotRequestBody: forwarding, gotRequestTrailers: forwarding, gotResponse: forwarding,
		gotResponseEnd: responded, workerDone: ended},
	responded: {gotRequestBody: responded, gotRequestTrailers: responded, gotResponse: responded,
		gotResponseEnd: responded, workerDone: ended},
	answered: {workerDone: ended},
	timedOut: {sentImmediate: timedOut, workerDone: ended},
	ended:    {},
}

// next is the phase after e in p. An illegal move leaves the phase as it is and returns a
// gRPC error: InvalidArgument for a message Envoy sent out of order (the stream ends with
// it, as for any protocol error), Internal for a move of the stream's own that the table
// does not allow (a bug).
func (p phase) next(e event) (phase, error) {
	if p < numPhases && e < numEvents {
		if to := transitions[p][e]; to != 0 {
			return to, nil
		}
	}
	switch {
	case !e.fromEnvoy() || p >= numPhases:
		return p, status.Errorf(codes.Internal, "ext_proc: a stream in phase %v cannot take event %v", p, e)
	case e == gotRequestHeaders:
		return p, status.Error(codes.InvalidArgument, "ext_proc: request headers arrived twice on one stream")
	case p == awaitingHeaders:
		return p, status.Errorf(codes.InvalidArgument, "ext_proc: %v arrived before the request headers", e)
	}
	return p, status.Errorf(codes.InvalidArgument, "ext_proc: %v arrived after the conversation ended (%v)", e, p)
}

// on moves the stream to the phase after e, or returns next's error and stays.
func (st *stream) on(e event) error {
	p, err := st.phase.next(e)
	st.phase = p
	return err
}
