package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/internal/testnet"
)

// upstream is a loopback HTTP server standing in for an engine: it records what it received and
// answers with the chunks of body, flushed one by one (a streamed, chunked response).
type upstream struct {
	*httptest.Server
	hits    atomic.Int32
	gotBody chan []byte
	gotHdr  chan http.Header
}

func newUpstream(t *testing.T, chunks ...string) *upstream {
	t.Helper()
	u := &upstream{gotBody: make(chan []byte, 16), gotHdr: make(chan http.Header, 16)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		u.gotBody <- b
		u.gotHdr <- r.Header.Clone()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			_, _ = io.WriteString(w, c)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.URL, "http://") }

// harness is a gateway in front of a fake picker, served on loopback.
type harness struct {
	gw       *gateway.Gateway
	url      string
	outcomes chan gateway.Outcome
}

func newHarness(t *testing.T, pickerAddr string, opts gateway.Options) *harness {
	t.Helper()
	h := &harness{outcomes: make(chan gateway.Outcome, 64)}
	opts.OnOutcome = func(o gateway.Outcome) { h.outcomes <- o }
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	gw, err := gateway.Dial(pickerAddr, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.gw = gw
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		srv.Close()
		if err := gw.Close(); err != nil {
			t.Errorf("close gateway: %v", err)
		}
	})
	h.url = srv.URL
	return h
}

func (h *harness) outcome(t *testing.T) gateway.Outcome {
	t.Helper()
	select {
	case o := <-h.outcomes:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome reported within 10s")
		return gateway.Outcome{}
	}
}

func post(t *testing.T, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "test")
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("X-Request-Id", "req-1")
	return req
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestGatewayTalksExtProcLikeEnvoy(t *testing.T) {
	const reqBody = `{"model":"m","prompt":"hello there, picker"}`
	sse := []string{"data: {\"t\":1}\n\n", "data: {\"t\":2}\n\n", "data: [DONE]\n\n"}
	tests := []struct {
		name     string
		mode     gateway.BodyMode
		wantMode extprocfilterv3.ProcessingMode_BodySendMode
		wantKind []string
	}{
		{"full-duplex streams headers and body chunks, then the response", gateway.FullDuplex,
			extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			[]string{"request_headers", "request_body", "response_headers", "response_body"}},
		{"buffered sends the whole body after the headers answer", gateway.Buffered,
			extprocfilterv3.ProcessingMode_BUFFERED,
			[]string{"request_headers", "request_body", "response_headers", "response_body"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, sse...)
			fp := newFakePicker(up.addr())
			fp.rewrite = func(b []byte) []byte { return bytes.Replace(b, []byte(`"m"`), []byte(`"model-b"`), 1) }
			h := newHarness(t, fp.start(t), gateway.Options{Mode: tc.mode, ChunkSize: 8})

			resp, got := do(t, post(t, h.url, reqBody))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, body %q", resp.StatusCode, got)
			}
			if want := strings.Join(sse, ""); got != want {
				t.Errorf("client got %q, want %q", got, want)
			}
			if p := resp.Header.Get("X-Picked"); p != up.addr() {
				t.Errorf("response header mutation not applied: x-picked = %q", p)
			}
			wantUp := strings.Replace(reqBody, `"m"`, `"model-b"`, 1)
			if b := <-up.gotBody; string(b) != wantUp {
				t.Errorf("upstream got body %q, want the picker's rewrite %q", b, wantUp)
			}
			if d := (<-up.gotHdr).Get("X-Gateway-Destination-Endpoint"); d != up.addr() {
				t.Errorf("upstream got destination header %q, want %q", d, up.addr())
			}
			o := h.outcome(t)
			h.gw.Wait()
			if err := <-fp.ends; !errors.Is(err, io.EOF) {
				t.Errorf("the stream ended with %v, want a clean half-close (EOF)", err)
			}

			msgs := fp.recorded(0)
			kinds, bodies, eos := phases(t, msgs)
			if diff := cmp.Diff(tc.wantKind, kinds); diff != "" {
				t.Errorf("message order (-want +got):\n%s", diff)
			}
			wantFirst := &extprocv3.ProcessingRequest{
				ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: tc.wantMode, ResponseBodyMode: tc.wantMode},
				Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
					Headers: headerMap(
						":authority", strings.TrimPrefix(h.url, "http://"), ":path", "/v1/completions",
						":method", "POST", ":scheme", "http",
						"accept-encoding", "identity", "content-length", fmt.Sprint(len(reqBody)),
						"content-type", "application/json", "user-agent", "test", "x-request-id", "req-1"),
				}},
			}
			if diff := cmp.Diff(wantFirst, msgs[0], protocmp.Transform()); diff != "" {
				t.Errorf("first message (-want +got):\n%s", diff)
			}
			if string(bodies["request_body"]) != reqBody || !eos["request_body"] {
				t.Errorf("request body sent %q (eos %v), want %q with end_of_stream", bodies["request_body"], eos["request_body"], reqBody)
			}
			if string(bodies["response_body"]) != strings.Join(sse, "") || !eos["response_body"] {
				t.Errorf("response body sent %q (eos %v)", bodies["response_body"], eos["response_body"])
			}
			wantChunks := 1
			if tc.mode == gateway.FullDuplex {
				wantChunks = (len(reqBody) + 7) / 8
			}
			if n := countKind(msgs, "request_body"); n != wantChunks {
				t.Errorf("request body in %d messages, want %d", n, wantChunks)
			}
			if rh := responseStatus(msgs); rh != "200" {
				t.Errorf("response headers carry :status %q, want 200", rh)
			}

			if o.Status != 200 || o.Endpoint != up.addr() || o.Attempts != 1 || o.RequestID != "req-1" || o.Err != "" {
				t.Errorf("outcome %+v", o)
			}
			if o.PickerTime <= 0 || o.TTFB <= 0 || o.Upstream <= 0 || o.Total < o.TTFB || o.Added() < 0 {
				t.Errorf("outcome times inconsistent: %+v", o)
			}
		})
	}
}

func TestBodylessRequestSendsEndOfStreamOnHeaders(t *testing.T) {
	for _, mode := range []gateway.BodyMode{gateway.FullDuplex, gateway.Buffered} {
		t.Run(string(mode), func(t *testing.T) {
			up := newUpstream(t, "ok")
			fp := newFakePicker(up.addr())
			h := newHarness(t, fp.start(t), gateway.Options{Mode: mode})
			resp, got := do(t, mustRequest(t, http.MethodGet, h.url+"/health"))
			if resp.StatusCode != 200 || got != "ok" {
				t.Fatalf("status %d body %q", resp.StatusCode, got)
			}
			h.outcome(t)
			h.gw.Wait()
			kinds, _, eos := phases(t, fp.recorded(0))
			want := []string{"request_headers", "response_headers", "response_body"}
			if diff := cmp.Diff(want, kinds); diff != "" {
				t.Errorf("message order (-want +got):\n%s", diff)
			}
			if !eos["request_headers"] {
				t.Error("request headers of a GET lack end_of_stream")
			}
		})
	}
}

func TestImmediateResponseAnswersTheClientWithoutUpstream(t *testing.T) {
	for _, mode := range []gateway.BodyMode{gateway.FullDuplex, gateway.Buffered} {
		t.Run(string(mode), func(t *testing.T) {
			up := newUpstream(t, "never")
			fp := newFakePicker(up.addr())
			fp.hook = func(s extprocv3.ExternalProcessor_ProcessServer, r *extprocv3.ProcessingRequest) (bool, error) {
				if r.GetRequestBody().GetEndOfStream() {
					return true, s.Send(immediateResponse(typev3.StatusCode_BadRequest, "inference error: BadRequest - no prompt"))
				}
				return false, nil
			}
			h := newHarness(t, fp.start(t), gateway.Options{Mode: mode})
			resp, got := do(t, post(t, h.url, `{"model":"m"}`))
			if resp.StatusCode != http.StatusBadRequest || got != "inference error: BadRequest - no prompt" {
				t.Errorf("client got %d %q, want 400 with the picker's body", resp.StatusCode, got)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/plain" {
				t.Errorf("immediate response header content-type = %q", ct)
			}
			o := h.outcome(t)
			if !o.Immediate || o.Status != http.StatusBadRequest || o.Endpoint != "" {
				t.Errorf("outcome %+v", o)
			}
			h.gw.Wait()
			if n := up.hits.Load(); n != 0 {
				t.Errorf("upstream was called %d times after an immediate response", n)
			}
		})
	}
}

func TestFallbackListSkipsAnEndpointThatRefusesConnections(t *testing.T) {
	dead := testnet.RefusedAddr(t)
	up := newUpstream(t, "served")
	fp := newFakePicker(dead + "," + up.addr())
	h := newHarness(t, fp.start(t), gateway.Options{})
	resp, got := do(t, post(t, h.url, `{"model":"m","prompt":"p"}`))
	if resp.StatusCode != 200 || got != "served" {
		t.Fatalf("status %d body %q", resp.StatusCode, got)
	}
	o := h.outcome(t)
	if o.Endpoint != up.addr() || o.Attempts != 2 || len(o.Destinations) != 2 {
		t.Errorf("outcome %+v, want the second endpoint after 2 attempts", o)
	}
}

func TestAllEndpointsRefusingIs503(t *testing.T) {
	fp := newFakePicker(testnet.RefusedAddr(t))
	h := newHarness(t, fp.start(t), gateway.Options{})
	resp, _ := do(t, post(t, h.url, `{"model":"m","prompt":"p"}`))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", resp.StatusCode)
	}
	h.gw.Wait()
	// Envoy's local reply goes through the ext_proc response phase and the stream ends
	// normally (decision 1535); it is no longer reset.
	if err := <-fp.ends; !errors.Is(err, io.EOF) {
		t.Errorf("stream ended with %v, want a clean end after the local reply's response phase", err)
	}
}

func TestPickerFailuresAre500(t *testing.T) {
	meta := "10.0.0.9:8000"
	tests := []struct {
		name  string
		setup func(fp *fakePicker)
	}{
		{"gRPC error", func(fp *fakePicker) {
			fp.hook = func(extprocv3.ExternalProcessor_ProcessServer, *extprocv3.ProcessingRequest) (bool, error) {
				return false, status.Error(codes.Internal, "boom")
			}
		}},
		{"header and metadata disagree", func(fp *fakePicker) { fp.meta = &meta }},
		{"body answer before headers answer", func(fp *fakePicker) {
			fp.hook = func(s extprocv3.ExternalProcessor_ProcessServer, r *extprocv3.ProcessingRequest) (bool, error) {
				if r.GetRequestBody().GetEndOfStream() {
					return true, s.Send(streamedBody(true, []byte("x"), true))
				}
				return false, nil
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, "never")
			fp := newFakePicker(up.addr())
			tc.setup(fp)
			h := newHarness(t, fp.start(t), gateway.Options{})
			resp, _ := do(t, post(t, h.url, `{"model":"m","prompt":"p"}`))
			if resp.StatusCode != http.StatusInternalServerError {
				t.Errorf("status %d, want 500", resp.StatusCode)
			}
			if o := h.outcome(t); o.Err == "" || o.Status != 500 {
				t.Errorf("outcome %+v, want an error", o)
			}
			if n := up.hits.Load(); n != 0 {
				t.Errorf("upstream called %d times", n)
			}
		})
	}
}

func TestPickerUnreachableIs500(t *testing.T) {
	h := newHarness(t, testnet.RefusedAddr(t), gateway.Options{})
	resp, body := do(t, post(t, h.url, `{"model":"m","prompt":"p"}`))
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "ext_proc") {
		t.Errorf("got %d %q, want 500 naming the ext_proc stream", resp.StatusCode, body)
	}
}

func TestSubsetHintTravelsInMetadataContext(t *testing.T) {
	up := newUpstream(t, "ok")
	fp := newFakePicker(up.addr())
	hint := []string{up.addr(), "10.0.0.2"}
	h := newHarness(t, fp.start(t), gateway.Options{SubsetHint: hint})
	do(t, post(t, h.url, `{"model":"m","prompt":"p"}`))
	h.outcome(t)
	list, _ := structpb.NewList([]any{hint[0], hint[1]})
	want := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb.subset_hint": {
		Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-subset": structpb.NewListValue(list)},
	}}}
	if diff := cmp.Diff(want, fp.recorded(0)[0].GetMetadataContext(), protocmp.Transform()); diff != "" {
		t.Errorf("metadata_context (-want +got):\n%s", diff)
	}
}

func TestGeneratedRequestIDReachesPickerAndUpstream(t *testing.T) {
	up := newUpstream(t, "ok")
	fp := newFakePicker(up.addr())
	h := newHarness(t, fp.start(t), gateway.Options{GenerateRequestID: true})
	req := post(t, h.url, `{"model":"m","prompt":"p"}`)
	req.Header.Del("X-Request-Id")
	do(t, req)
	o := h.outcome(t)
	if len(o.RequestID) != 36 {
		t.Fatalf("generated request id %q, want a UUID", o.RequestID)
	}
	if got := (<-up.gotHdr).Get("X-Request-Id"); got != o.RequestID {
		t.Errorf("upstream saw x-request-id %q, want %q", got, o.RequestID)
	}
	found := false
	for _, hv := range fp.recorded(0)[0].GetRequestHeaders().GetHeaders().GetHeaders() {
		found = found || hv.GetKey() == "x-request-id" && string(hv.GetRawValue()) == o.RequestID
	}
	if !found {
		t.Error("the picker did not see the generated x-request-id")
	}
}

func TestClientDisconnectCancelsTheStream(t *testing.T) {
	upstreamDone := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(upstreamDone)
		case <-time.After(20 * time.Second): // the test has failed by now; let it end
		}
	}))
	t.Cleanup(up.Close)
	fp := newFakePicker(strings.TrimPrefix(up.URL, "http://"))
	h := newHarness(t, fp.start(t), gateway.Options{})

	ctx, cancel := context.WithCancel(context.Background())
	req := post(t, h.url, `{"model":"m","prompt":"p","stream":true}`).WithContext(ctx)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("data: first\n\n"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatalf("read the first chunk: %v", err)
	}
	cancel()
	_ = resp.Body.Close()

	select {
	case err := <-fp.ends:
		if status.Code(err) != codes.Canceled {
			t.Errorf("the picker's stream ended with %v, want Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the picker's stream was not cancelled within 10s of the client leaving")
	}
	select {
	case <-upstreamDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	if o := h.outcome(t); !o.ClientGone {
		t.Errorf("outcome %+v, want ClientGone", o)
	}
}

func TestParseBodyMode(t *testing.T) {
	tests := []struct {
		in      string
		want    gateway.BodyMode
		wantErr bool
	}{
		{"full-duplex", gateway.FullDuplex, false},
		{"buffered", gateway.Buffered, false},
		{"streamed", "", true},
		{"", "", true},
	}
	for _, tc := range tests {
		got, err := gateway.ParseBodyMode(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseBodyMode(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := gateway.New(nil, gateway.Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := gateway.Dial("127.0.0.1:1", gateway.Options{Mode: "streamed"}); err == nil {
		t.Error("an unknown mode was accepted")
	}
	if _, err := gateway.Dial("127.0.0.1:1", gateway.Options{ChunkSize: -1}); err == nil {
		t.Error("a negative chunk size was accepted")
	}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return hm
}

func countKind(msgs []*extprocv3.ProcessingRequest, kind string) int {
	n := 0
	for _, m := range msgs {
		if k, _, _ := describe(m); k == kind {
			n++
		}
	}
	return n
}

func responseStatus(msgs []*extprocv3.ProcessingRequest) string {
	for _, m := range msgs {
		for _, h := range m.GetResponseHeaders().GetHeaders().GetHeaders() {
			if h.GetKey() == ":status" {
				return string(h.GetRawValue())
			}
		}
	}
	return ""
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
