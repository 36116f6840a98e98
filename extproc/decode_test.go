package extproc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// envoyMessages are the messages Envoy sends on the request path, each of which the
// decoder must read itself (not give up to proto.Unmarshal).
func envoyMessages() map[string]*extprocv3.ProcessingRequest {
	md, _ := structpb.NewStruct(map[string]any{SubsetHint: []any{"10.0.0.1:8000", "10.0.0.2:8000"}})
	withMD := postHeaders(PathCompletions, "x-user-id", "u1", "content-length", "8192")
	withMD.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{SubsetNamespace: md}}
	withMD.ObservabilityMode = true
	values := headers(false, ":path", PathChatCompletions)
	values.GetRequestHeaders().Headers.Headers = append(values.GetRequestHeaders().Headers.Headers,
		&corev3.HeaderValue{Key: "x-value", Value: "v"}, &corev3.HeaderValue{Key: "x-empty"})
	flags := body("{}", false)
	flags.GetRequestBody().EndOfStreamWithoutMessage, flags.GetRequestBody().GrpcMessageCompressed = true, true
	flags.GetRequestBody().DrainComplete = true
	trailers := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "grpc-status", RawValue: []byte("0")}}}
	return map[string]*extprocv3.ProcessingRequest{
		"headers with protocol": withProtocol(postHeaders(PathCompletions), filterv3.ProcessingMode_FULL_DUPLEX_STREAMED),
		"protocol, all fields": {ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: filterv3.ProcessingMode_BodySendMode(-7), SendBodyWithoutWaitingForHeaderResponse: true}},
		"headers with metadata":  withMD,
		"headers with values":    values,
		"headers ending":         headers(true, ":method", "GET", ":path", "/v1/models"),
		"headers empty":          {Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{}}},
		"header map empty":       {Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{}, EndOfStream: true}}},
		"body 8 KiB":             body(`{"model":"m","prompt":"`+strings.Repeat("x", 8170)+`"}`, true),
		"body chunk":             body(`{"model":`, false),
		"body empty":             body("", true),
		"body flags":             flags,
		"request trailers":       {Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{Trailers: trailers}}},
		"request trailers empty": {Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}},
		"response headers":       respHeaders(false),
		"response body":          respBody("data: [DONE]\n\n", true),
		"response trailers":      {Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: trailers}}},
	}
}

// Every message Envoy sends is read by the decoder itself, equal to protobuf's reading, with
// its bodies and raw header values pointing into the received bytes (no copy) and capped
// there.
func TestDecodeReadsEnvoysMessages(t *testing.T) {
	for name, m := range envoyMessages() {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got := new(extprocv3.ProcessingRequest)
			if !decodeRequest(b, got) {
				t.Fatal("the decoder gave up on a message Envoy sends")
			}
			if !proto.Equal(got, m) {
				t.Fatalf("decoded %v, want %v", got, m)
			}
			var aliased [][]byte
			if rb := got.GetRequestBody().GetBody(); rb != nil {
				aliased = append(aliased, rb)
			}
			for _, h := range append(got.GetRequestHeaders().GetHeaders().GetHeaders(), got.GetResponseHeaders().GetHeaders().GetHeaders()...) {
				if h.RawValue != nil {
					aliased = append(aliased, h.RawValue)
				}
			}
			for _, v := range aliased {
				if !within(v, b) || cap(v) != len(v) {
					t.Errorf("a %d-byte field is a copy or has capacity %d past its end, want it in the received bytes", len(v), cap(v)-len(v))
				}
			}
		})
	}
}

// within reports whether v's bytes lie inside b's.
func within(v, b []byte) bool {
	start, end := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))+uintptr(len(b))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	return p >= start && p+uintptr(len(v)) <= end
}

// What the decoder does not read itself goes to proto.Unmarshal: the message decoded is
// protobuf's, errors included.
func TestDecodeGivesUpToProtobuf(t *testing.T) {
	headerBytes := func(m *extprocv3.ProcessingRequest) []byte {
		b, _ := proto.Marshal(m)
		return b
	}
	hdr := headerBytes(postHeaders(PathCompletions))
	bdy := headerBytes(body("{}", true))
	attrs := headers(false, ":path", "/")
	attrs.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {}}
	// request_headers holding the deprecated attributes map (HttpHeaders field 2): {"a": {}}.
	entry := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("a"))
	entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), nil)
	oldAttrs := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType),
		protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), entry))
	badKey := protowire.AppendTag(nil, 2, protowire.BytesType)
	hv := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("\xff\xfe"))
	hm := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), hv)
	hh := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), hm)
	badKey = protowire.AppendBytes(badKey, hh)
	for _, c := range []struct {
		name    string
		b       []byte
		wantErr bool
	}{
		{"attributes", headerBytes(attrs), false},
		{"headers' deprecated attributes", oldAttrs, false},
		{"headers then body: the oneof's last wins", append(append([]byte{}, hdr...), bdy...), false},
		{"body twice: merged", append(append([]byte{}, bdy...), bdy...), false},
		{"unknown field", protowire.AppendVarint(protowire.AppendTag(append([]byte{}, hdr...), 99, protowire.VarintType), 7), false},
		{"known field, other wire type", protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 1), false},
		{"flow control", headerBytes(&extprocv3.ProcessingRequest{FlowControlInit: &extprocv3.ProcessingRequest_FlowControlInit{}}), false},
		{"invalid UTF-8 key", badKey, true},
		{"truncated", hdr[:len(hdr)-3], true},
		{"bad tag", []byte{0x80}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if decodeRequest(c.b, new(extprocv3.ProcessingRequest)) {
				t.Fatal("the decoder read it itself, want it given up")
			}
			want := new(extprocv3.ProcessingRequest)
			wantErr := proto.Unmarshal(c.b, want)
			if (wantErr != nil) != c.wantErr {
				t.Fatalf("proto.Unmarshal: %v; the case expects an error: %v", wantErr, c.wantErr)
			}
			var r received
			err := r.UnmarshalAliasing(mem.SliceBuffer(bytes.Clone(c.b)))
			if (err != nil) != (wantErr != nil) || (err == nil && !proto.Equal(r.ProcessingRequest, want)) {
				t.Fatalf("got %v, %v; want protobuf's %v, %v", r.ProcessingRequest, err, want, wantErr)
			}
			if r.buf != nil {
				t.Error("a message decoded by protobuf kept its buffer")
			}
		})
	}
}

// FuzzDecodeRequest holds the decoder to proto.Unmarshal: the same error or none, and the
// same message.
func FuzzDecodeRequest(f *testing.F) {
	for _, m := range envoyMessages() {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(extprocv3.ProcessingRequest)
		wantErr := proto.Unmarshal(b, want)
		if decodeRequest(b, new(extprocv3.ProcessingRequest)) && wantErr != nil {
			t.Fatalf("the decoder read a message protobuf refuses: %v", wantErr)
		}
		var r received
		err := r.UnmarshalAliasing(mem.SliceBuffer(bytes.Clone(b)))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("error %v, protobuf's %v", err, wantErr)
		}
		if err == nil && !sameMessage(r.ProcessingRequest, want) {
			t.Fatalf("decoded %v, protobuf %v", r.ProcessingRequest, want)
		}
		r.release()
	})
}

// sameMessage is proto.Equal, or the same deterministic encoding (a NaN in the metadata is
// not Equal to itself).
func sameMessage(a, b *extprocv3.ProcessingRequest) bool {
	if proto.Equal(a, b) {
		return true
	}
	o := proto.MarshalOptions{Deterministic: true}
	ab, err1 := o.Marshal(a)
	bb, err2 := o.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}

// BenchmarkDecode decodes extload's conversation as received (request headers as its
// client renders them, an 8 KiB body, response headers and a body), with proto.Unmarshal and
// with the aliasing decoder (each message then released). One op is one conversation.
func BenchmarkDecode(b *testing.B) {
	msgs := []*extprocv3.ProcessingRequest{
		withProtocol(headers(false, ":authority", "extload", ":path", PathCompletions, ":method", "POST", ":scheme", "http",
			"content-length", "8192", "content-type", "application/json", "x-request-id", "0f9c6a3e-4b1d-4c2a-9d7e-5a8b3c1f2e4d"),
			filterv3.ProcessingMode_FULL_DUPLEX_STREAMED),
		body(`{"model":"m","prompt":"`+strings.Repeat("x", 8170)+`"}`, true),
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: false,
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")},
				{Key: "content-type", RawValue: []byte("text/event-stream")}}}}}},
		respBody("data: [DONE]\n\n", true),
	}
	var wire [][]byte
	for _, m := range msgs {
		w, err := proto.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		wire = append(wire, w)
	}
	b.Run("decoder=protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, w := range wire {
				if err := proto.Unmarshal(w, new(extprocv3.ProcessingRequest)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("decoder=aliasing", func(b *testing.B) {
		b.ReportAllocs()
		var r received
		for b.Loop() {
			for _, w := range wire {
				if err := r.UnmarshalAliasing(mem.SliceBuffer(w)); err != nil {
					b.Fatal(err)
				}
				r.release()
			}
		}
	})
}

// One received decodes message after message into the same parts: each decoded message is
// protobuf's, whatever came before it (released or not, read by the decoder or given up),
// and after release nothing of a message is left in the parts.
func TestDecodePartsReused(t *testing.T) {
	msgs := envoyMessages()
	names := make([]string, 0, len(msgs)+3)
	var wire [][]byte
	for name := range msgs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b, err := proto.Marshal(msgs[name])
		if err != nil {
			t.Fatal(err)
		}
		wire = append(wire, b)
	}
	many := headers(false)
	for i := range maxKeptHeaders + 1 {
		many.GetRequestHeaders().Headers.Headers = append(many.GetRequestHeaders().Headers.Headers,
			&corev3.HeaderValue{Key: fmt.Sprintf("x-h%d", i), RawValue: []byte("v")})
	}
	attrs := headers(false, ":path", "/", "x-a", "b")
	attrs.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {}}
	for _, m := range []*extprocv3.ProcessingRequest{many, attrs} {
		b, _ := proto.Marshal(m)
		wire = append(wire, b)
	}
	names = append(names, "more headers than kept", "given up after its headers")
	truncated := wire[slices.Index(names, "headers with values")]
	wire = append(wire, truncated[:len(truncated)-2])
	names = append(names, "truncated")

	rng := rand.New(rand.NewPCG(1198, 1))
	var r received
	for round := range 200 {
		i := rng.IntN(len(wire))
		want := new(extprocv3.ProcessingRequest)
		wantErr := proto.Unmarshal(wire[i], want)
		err := r.UnmarshalAliasing(mem.SliceBuffer(bytes.Clone(wire[i])))
		if (err != nil) != (wantErr != nil) || (err == nil && !sameMessage(r.ProcessingRequest, want)) {
			t.Fatalf("round %d, %s: got %v, %v; want protobuf's %v, %v", round, names[i], r.ProcessingRequest, err, want, wantErr)
		}
		if rng.IntN(4) == 0 {
			continue // the next decode, not release, clears the parts
		}
		r.release()
		p := r.parts
		pv := reflect.ValueOf(p).Elem()
		for f := range pv.NumField() {
			if name := pv.Type().Field(f).Name; name != "values" && name != "pointer" && !pv.Field(f).IsZero() {
				t.Fatalf("round %d, %s: parts.%s left filled after release", round, names[i], name)
			}
		}
		for k := range p.values[:cap(p.values)] {
			if v := &p.values[:cap(p.values)][k]; v.Key != "" || v.Value != "" || v.RawValue != nil {
				t.Fatalf("round %d, %s: a header value left after release: %v", round, names[i], v)
			}
		}
		if cap(p.values) > maxKeptHeaders {
			t.Fatalf("round %d: the parts keep %d header values, want at most %d", round, cap(p.values), maxKeptHeaders)
		}
	}
}
