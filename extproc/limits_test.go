package extproc

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/loadaware/loadaware-epp/ratelog"
)

func emptyBodyResp() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
}

func respHeadersResp() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
}

// Envoy in STREAMED (or a mode added after this build) sends every body chunk and waits
// for one answer each: the picker routes at the headers on load alone and answers every
// chunk, never ending the stream with an error.
func TestStreamedAndUnknownBodyModesAreRoutedAtTheHeaders(t *testing.T) {
	for _, mode := range []filterv3.ProcessingMode_BodySendMode{filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_BodySendMode(99)} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}})
			st, _ := h.open(t)
			exchange(t, st, []*extprocv3.ProcessingRequest{withProtocol(postHeaders(PathCompletions), mode)},
				[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000")})
			exchange(t, st, []*extprocv3.ProcessingRequest{body(completion[:10], false), body(completion[10:], false), trailers()},
				[]*extprocv3.ProcessingResponse{emptyBodyResp(), emptyBodyResp(),
					{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}})
			exchange(t, st, []*extprocv3.ProcessingRequest{respHeaders(false), respBody("x", false), respBody("y", true)},
				[]*extprocv3.ProcessingResponse{respHeadersResp(),
					{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}},
					{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}})
			if h.inflight() != 0 {
				t.Fatalf("in flight %d after the response ended, want 0", h.inflight())
			}
			_ = st.CloseSend()
			if _, err := st.Recv(); err == nil || !strings.Contains(err.Error(), "EOF") {
				t.Fatalf("the stream should end cleanly, got %v", err)
			}
			<-h.done
		})
	}
}

func trailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
}

func TestExplainModes(t *testing.T) {
	tests := []struct {
		mode  ExplainMode
		token string // the picker's admin token
		auth  string // the request's Authorization header ("" = none)
		want  bool
	}{
		{ExplainToken, "s3cret", "Bearer s3cret", true},
		{ExplainToken, "s3cret", "", false},
		{ExplainToken, "s3cret", "Bearer wrong", false},
		{ExplainToken, "s3cret", "s3cret", false}, // not a bearer token
		{ExplainToken, "", "Bearer ", false},      // no token configured: nobody
		{ExplainAll, "", "", true},
		{ExplainOff, "s3cret", "Bearer s3cret", false},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String()+"/"+tt.auth, func(t *testing.T) {
			h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}, cfg: Config{Explain: tt.mode, AdminToken: tt.token}})
			st, _ := h.open(t)
			hdr := []string{ExplainHeader, "1"}
			if tt.auth != "" {
				hdr = append(hdr, "authorization", tt.auth)
			}
			exchange(t, st, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions, hdr...), body(completion, true)},
				[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000"), streamedBody(true, []byte(completion), true)})
			if err := st.Send(respHeaders(false)); err != nil {
				t.Fatal(err)
			}
			got, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			has := false
			for _, hv := range got.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
				has = has || hv.GetHeader().GetKey() == DecisionHeader
			}
			if has != tt.want {
				t.Fatalf("decision header given = %v, want %v", has, tt.want)
			}
		})
	}
	for _, s := range []string{"all", "off", "token"} {
		if m, err := ParseExplainMode(s); err != nil || m.String() != s {
			t.Errorf("ParseExplainMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseExplainMode("yes"); err == nil || !strings.Contains(err.Error(), "use token") {
		t.Errorf("ParseExplainMode(yes) error %v should say what to use", err)
	}
}

// Bodies being read share one budget: a stream that would go over it is refused with 503
// while the others go on, and the bytes come back when a stream is routed or ends.
func TestBufferedBytesBudget(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}, cfg: Config{Limits: Limits{MaxBufferedBytes: 3000}}})
	hog, cancelHog := h.open(t)
	for _, r := range []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(strings.Repeat(" ", 2000), false)} {
		if err := hog.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	// The budget is taken when the chunk is read; wait until the hog holds it.
	waitFor(t, func() bool { return h.server.bytes.used.Load() == 2000 })
	st, _ := h.open(t)
	exchange(t, st, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(strings.Repeat(" ", 1500), false)},
		[]*extprocv3.ProcessingResponse{immediateResp(typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable",
			"the picker holds its limit of 3000 bytes of request bodies being read (--max-buffered-bytes): retry shortly")})
	<-h.done
	// A body that arrives whole in one frame holds nothing while waiting: it is routed even
	// when the budget is spent.
	st2, _ := h.open(t)
	exchange(t, st2, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(completion+strings.Repeat(" ", 1500), true)},
		[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000"), streamedBody(true, []byte(completion+strings.Repeat(" ", 1500)), true)})
	waitFor(t, func() bool { return h.server.bytes.used.Load() == 2000 })
	cancelHog()
	<-h.done
	waitFor(t, func() bool { return h.server.bytes.used.Load() == 0 })
}

func TestStreamCap(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}, mode: Buffered, cfg: Config{Limits: Limits{MaxStreams: 1}}})
	first, cancel := h.open(t)
	exchange(t, first, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions)}, []*extprocv3.ProcessingResponse{continueHeaders()})
	second, _ := h.open(t)
	exchange(t, second, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions)},
		[]*extprocv3.ProcessingResponse{immediateResp(typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable",
			"the picker is serving its limit of 1 concurrent requests (--max-streams): retry shortly")})
	<-h.done
	cancel()
	<-h.done
	third, _ := h.open(t)
	exchange(t, third, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions)}, []*extprocv3.ProcessingResponse{continueHeaders()})
}

// The idle timeout is 250 ms, not less: the stream's parts are sent back to back, and a
// loaded -race host may pause between two of them for tens of milliseconds.
func TestIdleTimeoutWhileReadingOnly(t *testing.T) {
	const idle = 250 * time.Millisecond
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}, cfg: Config{Limits: Limits{IdleTimeout: idle}}})
	st, _ := h.open(t)
	exchange(t, st, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(completion[:5], false)},
		[]*extprocv3.ProcessingResponse{immediateResp(typev3.StatusCode_RequestTimeout, "RequestTimeout",
			"no part of the request arrived for 250ms while the picker was reading it (--stream-idle-timeout)")})
	<-h.done
	if h.server.bytes.used.Load() != 0 {
		t.Fatalf("a timed-out stream kept %d bytes of the budget", h.server.bytes.used.Load())
	}
	// Once routed, a slow engine is waited for: no timeout while the response is awaited.
	st2, _ := h.open(t)
	exchange(t, st2, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(completion, true)},
		[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000"), streamedBody(true, []byte(completion), true)})
	time.Sleep(2 * idle) // longer than the idle timeout: nothing may happen
	exchange(t, st2, []*extprocv3.ProcessingRequest{respHeaders(true)}, []*extprocv3.ProcessingResponse{respHeadersResp()})
	if h.inflight() != 0 {
		t.Fatalf("in flight %d", h.inflight())
	}
}

func TestOnResponseSeesTheStatus(t *testing.T) {
	var mu sync.Mutex
	var got []string
	var decided time.Time
	start := time.Now()
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}, cfg: Config{OnResponse: func(ep string, code int, at time.Time) {
		mu.Lock()
		got, decided = append(got, ep+" "+strconv.Itoa(code)), at
		mu.Unlock()
	}}})
	st, _ := h.open(t)
	resp := respHeaders(true)
	resp.GetResponseHeaders().GetHeaders().GetHeaders()[0].RawValue = []byte("503")
	exchange(t, st, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(completion, true), resp},
		[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000"), streamedBody(true, []byte(completion), true), respHeadersResp()})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "10.0.0.1:8000 503" {
		t.Fatalf("OnResponse saw %v, want [10.0.0.1:8000 503]", got)
	}
	if decided.Before(start) || decided.After(time.Now()) {
		t.Fatalf("OnResponse's decision time %v is not the request's (between %v and now)", decided, start)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestOverloadLogIsRateLimited(t *testing.T) {
	l := ratelog.New(overloadLogPeriod)
	t0 := time.Unix(0, 0)
	steps := []struct {
		at      time.Duration
		log     bool
		refused int
	}{{0, true, 1}, {time.Second, false, 0}, {9 * time.Second, false, 0}, {10 * time.Second, true, 3}, {11 * time.Second, false, 0}}
	for i, s := range steps {
		n, ok := l.Due("streams", t0.Add(s.at))
		if ok != s.log || n != s.refused {
			t.Fatalf("step %d: due = %d, %v; want %d, %v", i, n, ok, s.refused, s.log)
		}
	}
	if n, ok := l.Due("idle-timeout", t0.Add(11*time.Second)); !ok || n != 1 {
		t.Fatalf("another limit shares the rate: %d %v", n, ok)
	}
}

// fakePacer counts the delays asked of it and makes each last an hour.
type fakePacer struct{ asked atomic.Int64 }

func (p *fakePacer) Delay() time.Duration {
	p.asked.Add(1)
	return time.Hour
}

// readersLeft counts the goroutines still in a stream's worker.
func readersLeft() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "extproc.(*stream).work(")
}

// Only a stream past UnpacedBodyBytes is paced, a small stream on the same connection is
// routed while it waits, and a waiting reader ends with its stream.
func TestPacerWaitsOnlyLargeStreams(t *testing.T) {
	p := &fakePacer{}
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}, cfg: Config{
		Limits: Limits{UnpacedBodyBytes: 100}, Pacer: func(context.Context) Pacer { return p }}})
	before := readersLeft()
	large, cancel := h.open(t)
	for _, r := range []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(strings.Repeat(" ", 60), false), body(strings.Repeat(" ", 60), false)} {
		if err := large.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return p.asked.Load() == 1 }) // its second chunk waits an hour
	small, _ := h.open(t)
	exchange(t, small, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(completion, true)},
		[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000"), streamedBody(true, []byte(completion), true)})
	if n := p.asked.Load(); n != 1 {
		t.Fatalf("the pacer was asked %d times, want once (the large stream's second chunk only)", n)
	}
	cancel()
	<-h.done
	waitFor(t, func() bool { return readersLeft() <= before+1 }) // the small stream's stays until its end
	_ = small.CloseSend()
	waitFor(t, func() bool { return readersLeft() <= before })
}
