package gateway_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// fakePicker is a minimal ext_proc server that follows spec/endpoint-picker.md: it holds the
// headers answer until the request body ends (full-duplex), names dest in the destination header
// and in envoy.lb metadata (meta, when set, overrides the metadata value), rewrites the request
// body with rewrite, echoes the response, and records every message it receives.
type fakePicker struct {
	extprocv3.UnimplementedExternalProcessorServer

	dest    string
	meta    *string
	rewrite func([]byte) []byte
	// hook, when set, runs first for every received message; a true result means it answered.
	hook func(extprocv3.ExternalProcessor_ProcessServer, *extprocv3.ProcessingRequest) (bool, error)

	mu      sync.Mutex
	streams [][]*extprocv3.ProcessingRequest
	ends    chan error // the error Recv returned when each stream ended (io.EOF when clean)
}

func newFakePicker(dest string) *fakePicker {
	return &fakePicker{dest: dest, ends: make(chan error, 64)}
}

// start serves f on a free loopback port and returns the address.
func (f *fakePicker) start(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// recorded returns the messages of the i-th stream.
func (f *fakePicker) recorded(i int) []*extprocv3.ProcessingRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.streams) {
		return nil
	}
	return f.streams[i]
}

func (f *fakePicker) destMutation() *extprocv3.HeaderMutation {
	return &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: "x-gateway-destination-endpoint", RawValue: []byte(f.dest)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}}
}

func (f *fakePicker) metadata() *structpb.Struct {
	v := f.dest
	if f.meta != nil {
		v = *f.meta
	}
	s, _ := structpb.NewStruct(map[string]any{"envoy.lb": map[string]any{"x-gateway-destination-endpoint": v}})
	return s
}

func (f *fakePicker) Process(s extprocv3.ExternalProcessor_ProcessServer) error {
	f.mu.Lock()
	idx := len(f.streams)
	f.streams = append(f.streams, nil)
	f.mu.Unlock()
	fullDuplex := true
	var body []byte
	for {
		req, err := s.Recv()
		if err != nil {
			f.ends <- err
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		f.mu.Lock()
		f.streams[idx] = append(f.streams[idx], req)
		f.mu.Unlock()
		if pc := req.GetProtocolConfig(); pc != nil {
			fullDuplex = pc.GetRequestBodyMode() == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
		}
		if f.hook != nil {
			done, err := f.hook(s, req)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		var out []*extprocv3.ProcessingResponse
		switch v := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			switch {
			case v.RequestHeaders.GetEndOfStream():
				out = append(out, f.headersAnswer())
			case !fullDuplex:
				out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
					RequestHeaders: &extprocv3.HeadersResponse{},
				}})
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, v.RequestBody.GetBody()...)
			if !v.RequestBody.GetEndOfStream() {
				break
			}
			if f.rewrite != nil {
				body = f.rewrite(body)
			}
			if fullDuplex {
				out = append(out, f.headersAnswer())
				for len(body) > 0 || len(out) == 1 {
					n := min(len(body), 5)
					out = append(out, streamedBody(true, body[:n], n == len(body)))
					body = body[n:]
				}
			} else {
				out = append(out, &extprocv3.ProcessingResponse{
					DynamicMetadata: f.metadata(),
					Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
						Response: &extprocv3.CommonResponse{
							ClearRouteCache: true,
							HeaderMutation:  f.destMutation(),
							BodyMutation:    &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
						},
					}},
				})
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
					HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
						Header:       &corev3.HeaderValue{Key: "x-picked", RawValue: []byte(f.dest)},
						AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
					}}},
				}},
			}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			if fullDuplex {
				out = append(out, streamedBody(false, v.ResponseBody.GetBody(), v.ResponseBody.GetEndOfStream()))
			} else {
				out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
					ResponseBody: &extprocv3.BodyResponse{},
				}})
			}
		}
		for _, r := range out {
			if err := s.Send(r); err != nil {
				return err
			}
		}
	}
}

func (f *fakePicker) headersAnswer() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		DynamicMetadata: f.metadata(),
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: f.destMutation()},
		}},
	}
}

func streamedBody(request bool, b []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}},
	}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

func immediateResponse(code typev3.StatusCode, body string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: code},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
				Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("text/plain")},
			}}},
			Body: []byte(body),
		},
	}}
}

// describe renders a recorded message as one line: kind, end_of_stream, and body bytes.
func describe(m *extprocv3.ProcessingRequest) (kind string, eos bool, body []byte) {
	switch v := m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers", v.RequestHeaders.GetEndOfStream(), nil
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body", v.RequestBody.GetEndOfStream(), v.RequestBody.GetBody()
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers", v.ResponseHeaders.GetEndOfStream(), nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body", v.ResponseBody.GetEndOfStream(), v.ResponseBody.GetBody()
	}
	return "other", false, nil
}

// phases collapses a recorded stream into its kinds in order (consecutive body chunks merged),
// the concatenated bodies per kind, and the eos flag of each kind's last message. It fails the
// test when end_of_stream appears on a body chunk that is not the last of its run.
func phases(t *testing.T, msgs []*extprocv3.ProcessingRequest) (kinds []string, bodies map[string][]byte, eos map[string]bool) {
	t.Helper()
	bodies, eos = map[string][]byte{}, map[string]bool{}
	for i, m := range msgs {
		k, e, b := describe(m)
		if len(kinds) == 0 || kinds[len(kinds)-1] != k {
			kinds = append(kinds, k)
		} else if eos[k] {
			t.Errorf("message %d (%s) follows one with end_of_stream", i, k)
		}
		bodies[k] = append(bodies[k], b...)
		eos[k] = e
		if i > 0 && m.GetProtocolConfig() != nil {
			t.Errorf("message %d carries protocol_config; only the first may", i)
		}
	}
	for k := range bodies {
		if bytes.Equal(bodies[k], nil) {
			delete(bodies, k)
		}
	}
	return kinds, bodies, eos
}
