package grpcbuf

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echoAnswer is the full-duplex answer sending body back, on the request or response side.
func echoAnswer(request bool, body []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: eos}}}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

// marshalled is what Codec.Marshal sends for r, in one slice.
func marshalled(t testing.TB, r *extprocv3.ProcessingResponse) []byte {
	t.Helper()
	data, err := NewCodec(&Pool{}).Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return data.Materialize()
}

// TestEchoIsProtoMarshal encodes body answers of lengths around every varint width of
// the nested lengths, both sides, with and without end_of_stream: each is byte for byte
// proto.Marshal's, and the chunk is sent from the caller's bytes, not copied.
func TestEchoIsProtoMarshal(t *testing.T) {
	r := rand.NewChaCha8([32]byte{3})
	for _, n := range []int{0, 1, 100, 116, 117, 118, 127, 128, 8192, 16370, 16384, 1 << 21} {
		body := make([]byte, n)
		_, _ = r.Read(body)
		for _, request := range []bool{true, false} {
			for _, eos := range []bool{false, true} {
				m := echoAnswer(request, body, eos)
				want, err := proto.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				data, ok := marshalEcho(m, &headSlab{})
				if !ok {
					t.Fatalf("%d bytes, request %v, eos %v: not encoded as an echo", n, request, eos)
				}
				if got := data.Materialize(); !bytes.Equal(got, want) {
					t.Errorf("%d bytes, request %v, eos %v: %x..., want proto.Marshal's %x...", n, request, eos, got[:min(len(got), 16)], want[:min(len(want), 16)])
				}
				if n > 0 && (len(data) < 2 || unsafe.SliceData(data[1].ReadOnlyData()) != unsafe.SliceData(body)) {
					t.Errorf("%d bytes: the chunk was copied, not sent from the caller's bytes", n)
				}
			}
		}
	}
}

// TestEchoLeavesEverythingElseToProto sets one thing more than the echo at each level of
// the answer, or sends another answer: marshalEcho declines, and Codec.Marshal's bytes
// are still proto.Marshal's.
func TestEchoLeavesEverythingElseToProto(t *testing.T) {
	body := []byte("0123456789")
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	for _, c := range []struct {
		name string
		edit func(*extprocv3.ProcessingResponse)
	}{
		{"dynamic metadata", func(r *extprocv3.ProcessingResponse) {
			r.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStringValue("v")}}
		}},
		{"mode override", func(r *extprocv3.ProcessingResponse) { r.ModeOverride = &filterv3.ProcessingMode{} }},
		{"unknown bytes in the answer", func(r *extprocv3.ProcessingResponse) { r.ProtoReflect().SetUnknown(unknown) }},
		{"unknown bytes in the body response", func(r *extprocv3.ProcessingResponse) {
			r.GetRequestBody().ProtoReflect().SetUnknown(unknown)
		}},
		{"a status", func(r *extprocv3.ProcessingResponse) {
			r.GetRequestBody().Response.Status = extprocv3.CommonResponse_CONTINUE_AND_REPLACE
		}},
		{"a header mutation", func(r *extprocv3.ProcessingResponse) {
			r.GetRequestBody().Response.HeaderMutation = &extprocv3.HeaderMutation{RemoveHeaders: []string{"x"}}
		}},
		{"clear route cache", func(r *extprocv3.ProcessingResponse) { r.GetRequestBody().Response.ClearRouteCache = true }},
		{"unknown bytes in the mutation", func(r *extprocv3.ProcessingResponse) {
			r.GetRequestBody().Response.BodyMutation.ProtoReflect().SetUnknown(unknown)
		}},
		{"end of stream without message", func(r *extprocv3.ProcessingResponse) {
			r.GetRequestBody().Response.BodyMutation.GetStreamedResponse().EndOfStreamWithoutMessage = true
		}},
		{"unknown bytes in the chunk", func(r *extprocv3.ProcessingResponse) {
			r.GetRequestBody().Response.BodyMutation.GetStreamedResponse().ProtoReflect().SetUnknown(unknown)
		}},
		{"a whole-body mutation", func(r *extprocv3.ProcessingResponse) {
			r.GetRequestBody().Response.BodyMutation.Mutation = &extprocv3.BodyMutation_Body{Body: body}
		}},
		{"no common response", func(r *extprocv3.ProcessingResponse) { r.GetRequestBody().Response = nil }},
		{"a headers answer", func(r *extprocv3.ProcessingResponse) {
			r.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}
		}},
		{"an immediate response", func(r *extprocv3.ProcessingResponse) {
			r.Response = &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest},
				Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
					Header: &corev3.HeaderValue{Key: "k", RawValue: []byte("v")}}}}}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := echoAnswer(true, body, true)
			c.edit(m)
			if _, ok := marshalEcho(m, &headSlab{}); ok {
				t.Error("encoded as an echo, dropping what else the answer carries")
			}
			want, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if got := marshalled(t, m); !bytes.Equal(got, want) {
				t.Errorf("Codec.Marshal = %x, want proto.Marshal's %x", got, want)
			}
		})
	}
}

// TestHeadSlabNeverSharesBytes takes many heads, fills each with its own byte, and finds
// every one intact: no two overlap, across the slab's blocks.
func TestHeadSlabNeverSharesBytes(t *testing.T) {
	var s headSlab
	var heads [][]byte
	for i := range 3 * headBlock / 20 {
		n := 1 + i%40
		h := s.take(n)
		if len(h) != 0 || cap(h) != n {
			t.Fatalf("take(%d): len %d cap %d, want 0 and %d", n, len(h), cap(h), n)
		}
		heads = append(heads, append(h, bytes.Repeat([]byte{byte(i)}, n)...))
	}
	for i, h := range heads {
		if !bytes.Equal(h, bytes.Repeat([]byte{byte(i)}, len(h))) {
			t.Fatalf("head %d was overwritten: %x", i, h)
		}
	}
}

// FuzzEcho holds Codec.Marshal to proto.Marshal for body answers with fuzzed bodies,
// sides, ends and one optional extra field.
func FuzzEcho(f *testing.F) {
	f.Add([]byte("body"), true, true, uint8(0))
	f.Add([]byte{}, false, false, uint8(2))
	f.Add(bytes.Repeat([]byte{7}, 200), true, false, uint8(3))
	f.Fuzz(func(t *testing.T, body []byte, request, eos bool, extra uint8) {
		m := echoAnswer(request, body, eos)
		cr := m.GetRequestBody().GetResponse()
		if !request {
			cr = m.GetResponseBody().GetResponse()
		}
		switch extra % 4 {
		case 1:
			cr.ClearRouteCache = true
		case 2:
			cr.BodyMutation.GetStreamedResponse().EndOfStreamWithoutMessage = true
		case 3:
			m.ModeOverride = &filterv3.ProcessingMode{}
		}
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := marshalled(t, m); !bytes.Equal(got, want) {
			t.Fatalf("Codec.Marshal = %x, want proto.Marshal's %x", got, want)
		}
	})
}

// TestServerSendsEchoesExactly sends random chunks to a server with ServerOptions, which
// answers each with an echo of it, on several streams at once: the client, decoding with
// gRPC's own codec, gets every chunk back exactly, though the server's answers were written
// from the received bytes.
func TestServerSendsEchoesExactly(t *testing.T) {
	conn := serve(t, append(ServerOptions(), grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		for i := 0; ; i++ {
			var m wrapperspb.BytesValue
			if err := st.RecvMsg(&m); err != nil {
				return nil
			}
			if err := st.SendMsg(echoAnswer(i%2 == 0, m.Value, i%3 == 0)); err != nil {
				return err
			}
		}
	})))
	sizes := []int{0, 1, 127, 128, 8192, 16 << 10, 100 << 10, 1 << 20}
	done := make(chan error, 3)
	for stream := range 3 {
		go func() {
			done <- func() error {
				r := rand.NewChaCha8([32]byte{byte(stream)})
				st, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpcbuf.Echo/Echo")
				if err != nil {
					return err
				}
				for i := range 32 {
					msg := make([]byte, sizes[(i*5+stream)%len(sizes)])
					_, _ = r.Read(msg)
					if err := st.SendMsg(wrapperspb.Bytes(msg)); err != nil {
						return err
					}
					var got extprocv3.ProcessingResponse
					if err := st.RecvMsg(&got); err != nil {
						return err
					}
					want := echoAnswer(i%2 == 0, msg, i%3 == 0)
					if !proto.Equal(&got, want) {
						t.Errorf("stream %d message %d (%d bytes): the client got another answer than the echo", stream, i, len(msg))
					}
				}
				return st.CloseSend()
			}()
		}()
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkEchoMarshal marshals the answer sending an 8 KiB chunk back, as extload's
// requests and responses are, with gRPC's proto codec and with Codec.
func BenchmarkEchoMarshal(b *testing.B) {
	m := echoAnswer(true, make([]byte, 8192), true)
	for _, c := range []struct {
		name  string
		codec interface {
			Marshal(any) (mem.BufferSlice, error)
		}
	}{{"codec=grpc-proto", encoding.GetCodecV2(protocodec.Name)}, {"codec=grpcbuf", NewCodec(&Pool{})}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.codec.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}
