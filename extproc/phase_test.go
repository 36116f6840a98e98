package extproc

import (
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPhaseTransitions drives every event in every phase: each legal move lands where the
// stream's protocol says, and every other move keeps the phase and fails, InvalidArgument
// for a message Envoy sent out of order, Internal for a move of the stream's own.
func TestPhaseTransitions(t *testing.T) {
	type move struct {
		from phase
		on   event
	}
	legal := map[move]phase{
		{awaitingHeaders, gotRequestHeaders}: readingBody,
		{awaitingHeaders, idle}:              timedOut,
		{awaitingHeaders, workerDone}:        ended,

		{readingBody, gotRequestBody}:     readingBody,
		{readingBody, gotRequestTrailers}: readingBody,
		{readingBody, gotResponse}:        readingBody, // Envoy's local reply before routing passes through
		{readingBody, gotResponseEnd}:     responded,
		{readingBody, decided}:            forwarding,
		{readingBody, sentImmediate}:      answered,
		{readingBody, idle}:               timedOut,
		{readingBody, workerDone}:         ended,

		{forwarding, gotRequestBody}:     forwarding, // STREAMED: chunks after routing at the headers
		{forwarding, gotRequestTrailers}: forwarding,
		{forwarding, gotResponse}:        forwarding,
		{forwarding, gotResponseEnd}:     responded,
		{forwarding, workerDone}:         ended,

		{responded, gotRequestBody}:     responded,
		{responded, gotRequestTrailers}: responded,
		{responded, gotResponse}:        responded, // response trailers after the end
		{responded, gotResponseEnd}:     responded,
		{responded, workerDone}:         ended,

		{answered, workerDone}: ended,

		{timedOut, sentImmediate}: timedOut, // the 408 itself
		{timedOut, workerDone}:    ended,
	}
	// The errors whose wording a user or an operator reads in a log.
	wording := map[move]string{
		{readingBody, gotRequestHeaders}:      "ext_proc: request headers arrived twice on one stream",
		{forwarding, gotRequestHeaders}:       "ext_proc: request headers arrived twice on one stream",
		{awaitingHeaders, gotRequestBody}:     "ext_proc: request body arrived before the request headers",
		{awaitingHeaders, gotResponse}:        "ext_proc: response arrived before the request headers",
		{answered, gotRequestBody}:            "ext_proc: request body arrived after the conversation ended (answered)",
		{readingBody, gotRequestBody + 100}:   "ext_proc: a stream in phase reading-body cannot take event event(101)",
		{forwarding, decided}:                 "ext_proc: a stream in phase forwarding cannot take event decision",
		{ended, workerDone}:                   "ext_proc: a stream in phase ended cannot take event worker done",
		{numPhases + 1, gotRequestHeaders}:    "ext_proc: a stream in phase phase(9) cannot take event request headers",
		{awaitingHeaders, gotRequestTrailers}: "ext_proc: request trailers arrived before the request headers",
	}
	for from := awaitingHeaders; from < numPhases; from++ {
		for e := event(0); e < numEvents; e++ {
			m := move{from, e}
			t.Run(from.String()+"/"+e.String(), func(t *testing.T) {
				to, err := from.next(e)
				if want, ok := legal[m]; ok {
					if err != nil || to != want {
						t.Fatalf("got %v, %v; want %v", to, err, want)
					}
					return
				}
				wantCode := codes.Internal
				if e.fromEnvoy() {
					wantCode = codes.InvalidArgument
				}
				if to != from || status.Code(err) != wantCode {
					t.Fatalf("got %v, %v; want to stay in %v with a %v error", to, err, from, wantCode)
				}
			})
		}
	}
	for m, want := range wording {
		t.Run("wording/"+m.from.String()+"/"+m.on.String(), func(t *testing.T) {
			if _, err := m.from.next(m.on); status.Convert(err).Message() != want {
				t.Fatalf("error %v, want %q", err, want)
			}
		})
	}
}

// Every phase and event has a name, and every phase but ended can end.
func TestPhaseNames(t *testing.T) {
	for p := awaitingHeaders; p < numPhases; p++ {
		if strings.HasPrefix(p.String(), "phase(") {
			t.Errorf("phase %d has no name", p)
		}
		if _, err := p.next(workerDone); (err == nil) == (p == ended) {
			t.Errorf("phase %v: worker done gives %v", p, err)
		}
	}
	for e := event(0); e < numEvents; e++ {
		if strings.HasPrefix(e.String(), "event(") {
			t.Errorf("event %d has no name", e)
		}
	}
}

// Envoy's messages out of order end the stream with InvalidArgument, through the real gRPC
// stream, before anything is routed or booked.
func TestMessagesBeforeTheHeadersAreRefused(t *testing.T) {
	tests := []struct {
		name string
		req  *extprocv3.ProcessingRequest
		msg  string
	}{
		{"request body", body(completion, true), "ext_proc: request body arrived before the request headers"},
		{"request trailers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{}}}, "ext_proc: request trailers arrived before the request headers"},
		{"response headers", respHeaders(true), "ext_proc: response end arrived before the request headers"},
		{"response body", respBody("x", false), "ext_proc: response arrived before the request headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}})
			st, _ := h.open(t)
			if err := st.Send(tt.req); err != nil {
				t.Fatal(err)
			}
			_, err := st.Recv()
			if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != tt.msg {
				t.Fatalf("got %v, want InvalidArgument %q", err, tt.msg)
			}
			<-h.done
			if h.inflight() != 0 || h.server.bytes.used.Load() != 0 {
				t.Fatalf("left %d in flight and %d bytes held", h.inflight(), h.server.bytes.used.Load())
			}
		})
	}
}
