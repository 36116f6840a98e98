package extproc

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/picker"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is a real gRPC ext_proc server on a loopback port in front of a real picker.
type harness struct {
	fleet  *fleet.Set
	picker *picker.Picker
	server *Server
	client extprocv3.ExternalProcessorClient
	health healthpb.HealthClient
	done   chan struct{} // one value per finished stream
}

type harnessOpts struct {
	endpoints []string
	mode      BodyMode
	maxBody   int64
	maxEps    int
	scores    bool   // emit the scores and the reason in the dynamic metadata
	cfg       Config // Limits, Explain, AdminToken, OnResponse
	cache     picker.CacheView
	policy    string   // default leastload
	base      []string // picker.Options.BaseModels
	grpcOpts  []grpc.ServerOption
}

// serveLoopback serves gs, its services registered, on a free loopback port and returns a
// client connection to it; the connection is closed, then the server stopped, when the test
// ends.
func serveLoopback(t testing.TB, gs *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		gs.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return conn
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	f := fleet.New()
	if o.endpoints != nil {
		f.Update(o.endpoints)
	}
	if o.policy == "" {
		o.policy = "leastload"
	}
	p, err := picker.New(picker.Options{Fleet: f, Policy: o.policy, MaxEndpoints: o.maxEps, Cache: o.cache, BaseModels: o.base})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.cfg
	cfg.BodyMode, cfg.MaxBodyBytes, cfg.OmitScores = o.mode, o.maxBody, !o.scores
	s, err := NewServer(p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{fleet: f, picker: p, server: s, done: make(chan struct{}, 64)}
	s.streamDone = func() { h.done <- struct{}{} }
	gs := grpc.NewServer(o.grpcOpts...)
	extprocv3.RegisterExternalProcessorServer(gs, s)
	hs := NewHealth()
	hs.SetServing(true)
	healthpb.RegisterHealthServer(gs, hs)
	conn := serveLoopback(t, gs)
	h.client = extprocv3.NewExternalProcessorClient(conn)
	h.health = healthpb.NewHealthClient(conn)
	return h
}

func (h *harness) open(t testing.TB) (extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return st, cancel
}

// route opens a stream, sends a full-duplex completion (its headers with kv added, then its
// body) and returns the stream and the destination answered, once the body is echoed back.
func (h *harness) route(t testing.TB, kv ...string) (extprocv3.ExternalProcessor_ProcessClient, string) {
	t.Helper()
	st, _ := h.open(t)
	if err := st.Send(postHeaders(PathCompletions, kv...)); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(body(completion, true)); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // the body echoed back
		t.Fatal(err)
	}
	return st, string(r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()[0].GetHeader().GetRawValue())
}

func (h *harness) inflight() int {
	n := 0
	for _, l := range h.fleet.All() {
		n += l.InFlight()
	}
	return n
}

// Request builders.

func headers(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos}}}
}

func postHeaders(path string, kv ...string) *extprocv3.ProcessingRequest {
	return headers(false, append([]string{":method", "POST", ":path", path, "x-request-id", "req-1"}, kv...)...)
}

func withProtocol(r *extprocv3.ProcessingRequest, m filterv3.ProcessingMode_BodySendMode) *extprocv3.ProcessingRequest {
	r.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: m, ResponseBodyMode: m}
	return r
}

func body(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func respHeaders(eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: eos, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte("200")}, {Key: "content-type", RawValue: []byte("text/event-stream")}}}}}}
}

func respBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

// Expected responses.

// streamedBody is a request (or response) StreamedBodyResponse.
func streamedBody(request bool, b []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

func routed(dest string, extra ...*corev3.HeaderValueOption) (*extprocv3.CommonResponse, *structpb.Struct) {
	set := append([]*corev3.HeaderValueOption{setHeader(DestinationHeader, dest)}, extra...)
	md, _ := structpb.NewStruct(map[string]any{LBNamespace: map[string]any{DestinationHeader: dest}})
	return &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}, md
}

func routedHeaders(dest string) *extprocv3.ProcessingResponse {
	c, md := routed(dest)
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: c}}, DynamicMetadata: md}
}

func routedBody(dest string) *extprocv3.ProcessingResponse {
	c, md := routed(dest)
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: c}}, DynamicMetadata: md}
}

func continueHeaders() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
}

func immediateResp(code typev3.StatusCode, kind, msg string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: code},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader("content-type", "text/plain; charset=utf-8"), setHeader(RequestIDHeader, "req-1")}},
			Body:    []byte("inference error: " + kind + " - " + msg),
			Details: "loadaware_epp_" + strings.ToLower(kind),
		}}}
}

// exchange sends reqs and then reads want responses, comparing them whole.
func exchange(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient, reqs []*extprocv3.ProcessingRequest, want []*extprocv3.ProcessingResponse) {
	t.Helper()
	for _, r := range reqs {
		if err := st.Send(r); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	for i, w := range want {
		got, err := st.Recv()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if d := cmp.Diff(w, got, protocmp.Transform(), protocmp.SortRepeated(func(a, b *corev3.HeaderValueOption) bool {
			return a.GetHeader().GetKey() < b.GetHeader().GetKey()
		})); d != "" {
			t.Fatalf("response %d differs (-want +got):\n%s", i, d)
		}
	}
}

const completion = `{"model":"qwen","prompt":[1,2,3],"max_tokens":4,"stream":true}`

func TestFullDuplexCompletionRoundTrip(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}})
	st, _ := h.open(t)
	// The body arrives in several frames; nothing is answered before its end.
	exchange(t, st, []*extprocv3.ProcessingRequest{
		withProtocol(postHeaders(PathCompletions), filterv3.ProcessingMode_FULL_DUPLEX_STREAMED),
		body(completion[:10], false), body(completion[10:30], false), body(completion[30:], true),
	}, []*extprocv3.ProcessingResponse{
		routedHeaders("10.0.0.1:8000"),
		streamedBody(true, []byte(completion), true),
	})
	if h.inflight() != 1 {
		t.Fatalf("in flight %d after routing, want 1", h.inflight())
	}
	exchange(t, st, []*extprocv3.ProcessingRequest{respHeaders(false), respBody("data: a\n\n", false)},
		[]*extprocv3.ProcessingResponse{
			{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}},
			streamedBody(false, []byte("data: a\n\n"), false),
		})
	if l := h.fleet.Loads([]string{"10.0.0.1:8000"})[0]; l.Decode != 1 || l.Prefill != 0 {
		t.Fatalf("after the first response chunk the request should be decoding: %+v", l)
	}
	exchange(t, st, []*extprocv3.ProcessingRequest{respBody("data: [DONE]\n\n", true)},
		[]*extprocv3.ProcessingResponse{streamedBody(false, []byte("data: [DONE]\n\n"), true)})
	if h.inflight() != 0 {
		t.Fatalf("in flight %d after the response ended, want 0", h.inflight())
	}
	_ = st.CloseSend()
	<-h.done
}

func TestBufferedCompletion(t *testing.T) {
	for _, viaConfig := range []bool{true, false} {
		t.Run(fmt.Sprintf("protocol_config=%v", viaConfig), func(t *testing.T) {
			mode := FullDuplex
			hdr := withProtocol(postHeaders(PathCompletions), filterv3.ProcessingMode_BUFFERED)
			if !viaConfig {
				mode, hdr = Buffered, postHeaders(PathCompletions)
			}
			h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}, mode: mode})
			st, _ := h.open(t)
			exchange(t, st, []*extprocv3.ProcessingRequest{hdr}, []*extprocv3.ProcessingResponse{continueHeaders()})
			exchange(t, st, []*extprocv3.ProcessingRequest{body(completion, true)}, []*extprocv3.ProcessingResponse{routedBody("10.0.0.1:8000")})
			exchange(t, st, []*extprocv3.ProcessingRequest{respHeaders(false), respBody("{}", true)}, []*extprocv3.ProcessingResponse{
				{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}},
				{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}},
			})
			if h.inflight() != 0 {
				t.Fatalf("in flight %d after the response, want 0", h.inflight())
			}
		})
	}
}

func TestHeaderOnlyRequestIsRoutedAtOnce(t *testing.T) {
	for _, mode := range []BodyMode{FullDuplex, Buffered} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, mode: mode})
			st, _ := h.open(t)
			exchange(t, st, []*extprocv3.ProcessingRequest{headers(true, ":method", "GET", ":path", "/v1/models", "x-request-id", "req-1")},
				[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000")})
			exchange(t, st, []*extprocv3.ProcessingRequest{respHeaders(true)},
				[]*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}})
			if h.inflight() != 0 {
				t.Fatalf("a response that ends at its headers must release: in flight %d", h.inflight())
			}
		})
	}
}

func TestMissingRequestIDIsGenerated(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}})
	st, _ := h.open(t)
	if err := st.Send(headers(true, ":method", "GET", ":path", "/health")); err != nil {
		t.Fatal(err)
	}
	got, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, o := range got.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == RequestIDHeader {
			id = string(o.GetHeader().GetRawValue())
			if o.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
				t.Errorf("x-request-id append action %v", o.GetAppendAction())
			}
		}
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Fatalf("generated x-request-id %q is not a v4 UUID", id)
	}
}

// TestErrorRows drives every error row of the spec in both body modes.
func TestErrorRows(t *testing.T) {
	tooBig := strings.Repeat("x", 2000)
	tests := []struct {
		name      string
		endpoints []string
		path      string
		bodies    []string
		extraHdr  []string
		subset    *structpb.Value
		code      typev3.StatusCode
		kind, msg string
	}{
		{"body not JSON", []string{"10.0.0.1:1"}, PathCompletions, []string{`{"model":`}, nil, nil,
			typev3.StatusCode_BadRequest, "BadRequest", "the request body is not valid JSON: unexpected end of JSON input"},
		{"empty body", []string{"10.0.0.1:1"}, PathCompletions, []string{``}, nil, nil,
			typev3.StatusCode_BadRequest, "BadRequest", `the request body is empty: send a JSON object with "model"`},
		{"no model", []string{"10.0.0.1:1"}, PathCompletions, []string{`{"prompt":"x"}`}, nil, nil,
			typev3.StatusCode_BadRequest, "BadRequest", `the request body has no "model": name the model to use`},
		{"completions without prompt", []string{"10.0.0.1:1"}, PathCompletions, []string{`{"model":"m"}`}, nil, nil,
			typev3.StatusCode_BadRequest, "BadRequest", `a completions request needs "prompt": a string, a list of strings, or token ids`},
		{"chat without messages", []string{"10.0.0.1:1"}, PathChatCompletions, []string{`{"model":"m"}`}, nil, nil,
			typev3.StatusCode_BadRequest, "BadRequest", `a chat completions request needs "messages": a list of {"role", "content"} objects`},
		{"body over the limit, in frames", []string{"10.0.0.1:1"}, PathCompletions, []string{tooBig[:600], tooBig[600:]}, nil, nil,
			typev3.StatusCode_PayloadTooLarge, "BadRequest", "the request body is over the limit of 1024 bytes (--max-body-bytes)"},
		{"content-length over the limit", []string{"10.0.0.1:1"}, PathCompletions, nil, []string{"content-length", "5000"}, nil,
			typev3.StatusCode_PayloadTooLarge, "BadRequest", "the request body is over the limit of 1024 bytes (--max-body-bytes)"},
		{"no endpoints", nil, PathCompletions, []string{completion}, nil, nil,
			typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable", picker.ErrNoEndpoints.Error()},
		{"subset empty", []string{"10.0.0.1:1"}, PathCompletions, []string{completion}, nil, structpb.NewListValue(&structpb.ListValue{}),
			typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable", picker.ErrSubsetEmpty.Error()},
		{"subset unmatched", []string{"10.0.0.1:1"}, PathCompletions, []string{completion}, nil, structpb.NewStringValue("10.0.0.9:1"),
			typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable", picker.ErrSubsetUnmatched.Error() + " (hint: 10.0.0.9:1; endpoints: 10.0.0.1:1)"},
	}
	for _, mode := range []BodyMode{FullDuplex, Buffered} {
		for _, tt := range tests {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				h := newHarness(t, harnessOpts{endpoints: tt.endpoints, mode: mode, maxBody: 1024})
				st, _ := h.open(t)
				hdr := postHeaders(tt.path, tt.extraHdr...)
				if tt.subset != nil {
					hdr.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
						SubsetNamespace: {Fields: map[string]*structpb.Value{SubsetHint: tt.subset}}}}
				}
				want := []*extprocv3.ProcessingResponse{immediateResp(tt.code, tt.kind, tt.msg)}
				if mode == Buffered && tt.bodies != nil {
					exchange(t, st, []*extprocv3.ProcessingRequest{hdr}, []*extprocv3.ProcessingResponse{continueHeaders()})
					hdr = nil
				}
				var reqs []*extprocv3.ProcessingRequest
				if hdr != nil {
					reqs = append(reqs, hdr)
				}
				bodies := tt.bodies
				if mode == Buffered && bodies != nil {
					bodies = []string{strings.Join(bodies, "")} // Envoy sends a buffered body whole
				}
				for i, b := range bodies {
					reqs = append(reqs, body(b, i == len(bodies)-1))
				}
				exchange(t, st, reqs, want)
				if _, err := st.Recv(); err == nil {
					t.Fatal("the stream should end after an ImmediateResponse")
				}
				if h.inflight() != 0 {
					t.Fatalf("an error left %d in flight", h.inflight())
				}
			})
		}
	}
}

func TestSubsetHintAndFallbackList(t *testing.T) {
	tests := []struct {
		name   string
		hint   *structpb.Value
		maxEps int
		want   string
	}{
		{"list hint", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("10.0.0.3:8000")}}), 1, "10.0.0.3:8000"},
		{"comma string hint", structpb.NewStringValue("10.0.0.3:8000,10.0.0.2:8000"), 1, "10.0.0.2:8000"},
		{"fallback list without spaces", nil, 3, "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000"},
		{"fallback list within the hint", structpb.NewStringValue("10.0.0.3:8000, 10.0.0.2:8000"), 3, "10.0.0.2:8000,10.0.0.3:8000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}, maxEps: tt.maxEps})
			st, _ := h.open(t)
			hdr := headers(true, ":method", "GET", ":path", "/x", "x-request-id", "req-1")
			if tt.hint != nil {
				hdr.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
					SubsetNamespace: {Fields: map[string]*structpb.Value{SubsetHint: tt.hint}}}}
			}
			exchange(t, st, []*extprocv3.ProcessingRequest{hdr}, []*extprocv3.ProcessingResponse{routedHeaders(tt.want)})
		})
	}
}

func TestRequestTrailersEndTheBody(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}})
	st, _ := h.open(t)
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
	exchange(t, st, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(completion, false), trailers},
		[]*extprocv3.ProcessingResponse{
			routedHeaders("10.0.0.1:8000"),
			streamedBody(true, []byte(completion), false),
			{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}},
		})
}

func TestLargeBodyIsStreamedBackInChunks(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}})
	st, _ := h.open(t)
	prompt := strings.Repeat("word ", 30000) // 150 kB
	b := `{"model":"m","prompt":"` + prompt + `"}`
	var reqs []*extprocv3.ProcessingRequest
	reqs = append(reqs, postHeaders(PathCompletions))
	for off := 0; off < len(b); off += 16384 {
		end := min(off+16384, len(b))
		reqs = append(reqs, body(b[off:end], end == len(b)))
	}
	want := []*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000")}
	for off := 0; off < len(b); off += MaxStreamedChunk {
		end := min(off+MaxStreamedChunk, len(b))
		want = append(want, streamedBody(true, []byte(b[off:end]), end == len(b)))
	}
	exchange(t, st, reqs, want)
}

func TestResponseTrailersRelease(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}})
	st, _ := h.open(t)
	exchange(t, st, []*extprocv3.ProcessingRequest{headers(true, ":path", "/x", "x-request-id", "req-1")},
		[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000")})
	exchange(t, st, []*extprocv3.ProcessingRequest{respHeaders(false), respBody("x", false),
		{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}},
		[]*extprocv3.ProcessingResponse{
			{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}},
			streamedBody(false, []byte("x"), false),
			{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}},
		})
	if h.inflight() != 0 {
		t.Fatalf("response trailers must release: in flight %d", h.inflight())
	}
}

func TestStreamEndingEarlyReleasesTheBooking(t *testing.T) {
	tests := []struct {
		name string
		end  func(extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc)
	}{
		{"client gone (cancel) mid-response", func(_ extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc) { cancel() }},
		{"Envoy half-closes without a response end", func(st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) { _ = st.CloseSend() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}})
			st, cancel := h.open(t)
			exchange(t, st, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(completion, true), respHeaders(false), respBody("data: x\n\n", false)},
				[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000"), streamedBody(true, []byte(completion), true),
					{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}},
					streamedBody(false, []byte("data: x\n\n"), false)})
			if h.inflight() != 1 {
				t.Fatalf("in flight %d mid-response, want 1", h.inflight())
			}
			tt.end(st, cancel)
			<-h.done
			if h.inflight() != 0 {
				t.Fatalf("in flight %d after the stream ended early, want 0", h.inflight())
			}
		})
	}
}

func TestExplainHeader(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, cfg: Config{Explain: ExplainAll}})
	st, _ := h.open(t)
	exchange(t, st, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions, ExplainHeader, "1"), body(completion, true)},
		[]*extprocv3.ProcessingResponse{routedHeaders("10.0.0.1:8000"), streamedBody(true, []byte(completion), true)})
	if err := st.Send(respHeaders(false)); err != nil {
		t.Fatal(err)
	}
	got, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	set := got.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()
	if len(set) != 1 || set[0].GetHeader().GetKey() != DecisionHeader {
		t.Fatalf("response headers mutation %v, want one %s header", set, DecisionHeader)
	}
	v := string(set[0].GetHeader().GetRawValue())
	for _, want := range []string{"policy=leastload", "winner=10.0.0.1:8000", "prompt_tokens=3", "10.0.0.2:8000 matched=0 inflight=0"} {
		if !strings.Contains(v, want) {
			t.Errorf("explanation %q lacks %q", v, want)
		}
	}
}

func TestConcurrentStreamsSpreadAndRelease(t *testing.T) {
	eps := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"}
	h := newHarness(t, harnessOpts{endpoints: eps})
	const n = 40
	streams := make([]extprocv3.ExternalProcessor_ProcessClient, n)
	got := map[string]int{}
	for i := range streams {
		st, dest := h.route(t)
		streams[i] = st
		got[dest]++
	}
	keys := make([]string, 0, len(got))
	for k, v := range got {
		keys = append(keys, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(keys)
	if len(got) != 4 || got[eps[0]] != n/4 {
		t.Fatalf("leastload over held streams should spread evenly: %v", keys)
	}
	for _, st := range streams {
		_ = st.CloseSend()
	}
	for range streams {
		<-h.done
	}
	if h.inflight() != 0 {
		t.Fatalf("in flight %d after all streams ended", h.inflight())
	}
}

func TestHealthServesEveryName(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}})
	for _, name := range []string{"", "envoy.service.ext_proc.v3.ExternalProcessor", "inference-extension", "liveness", "readiness", "anything"} {
		r, err := h.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) = %v, %v; want SERVING", name, r, err)
		}
	}
}

func TestHealthWatchSeesChanges(t *testing.T) {
	hs := NewHealth()
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	conn := serveLoopback(t, gs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING} {
		r, err := w.Recv()
		if err != nil || r.GetStatus() != want {
			t.Fatalf("watch got %v, %v; want %v", r, err, want)
		}
		hs.SetServing(true)
	}
}

// Decisions are pooled between streams (PickInto): a stream that ends hands its decision
// back while others are open, and a later stream's decision must not be any open
// stream's. Each stream's explanation, read after the others decided and ended, names its
// own winner.
func TestPooledDecisionsAreNeverShared(t *testing.T) {
	eps := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"}
	h := newHarness(t, harnessOpts{endpoints: eps, cfg: Config{Explain: ExplainAll}})
	explained := func(st extprocv3.ExternalProcessor_ProcessClient) string {
		if err := st.Send(respHeaders(false)); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return string(r.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()[0].GetHeader().GetRawValue())
	}
	finish := func(st extprocv3.ExternalProcessor_ProcessClient) {
		if err := st.Send(respBody("data: [DONE]\n\n", true)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
		<-h.done
	}
	type open struct {
		st     extprocv3.ExternalProcessor_ProcessClient
		winner string
	}
	var live []open
	for round := range 3 {
		for range 3 {
			st, w := h.route(t, ExplainHeader, "1")
			live = append(live, open{st, w})
		}
		// End the oldest two: their decisions go back to the pool for the next round.
		for _, o := range live[:2] {
			if ex := explained(o.st); !strings.Contains(ex, "winner="+o.winner+" ") {
				t.Fatalf("round %d: a stream routed to %s explains %q", round, o.winner, ex)
			}
			finish(o.st)
		}
		live = live[2:]
	}
	for _, o := range live {
		if ex := explained(o.st); !strings.Contains(ex, "winner="+o.winner+" ") {
			t.Errorf("a stream routed to %s explains %q", o.winner, ex)
		}
		finish(o.st)
	}
	if h.inflight() != 0 {
		t.Fatalf("in flight %d after every stream ended", h.inflight())
	}
}
