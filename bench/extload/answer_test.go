package extload

import (
	"math/rand/v2"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loadaware/loadaware-epp/bench/gateway"
)

// TestAnswerFieldNumbers holds answer's field numbers to the messages' descriptors.
func TestAnswerFieldNumbers(t *testing.T) {
	field := func(m proto.Message, name string) protowire.Number {
		f := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
		if f == nil {
			t.Fatalf("%s has no field %s", m.ProtoReflect().Descriptor().FullName(), name)
		}
		return f.Number()
	}
	for _, tc := range []struct {
		m    proto.Message
		name string
		want protowire.Number
	}{
		{&extprocv3.ProcessingResponse{}, "request_headers", respRequestHeaders},
		{&extprocv3.ProcessingResponse{}, "response_headers", respResponseHeaders},
		{&extprocv3.ProcessingResponse{}, "request_body", respRequestBody},
		{&extprocv3.ProcessingResponse{}, "response_body", respResponseBody},
		{&extprocv3.ProcessingResponse{}, "immediate_response", respImmediateResponse},
		{&extprocv3.HeadersResponse{}, "response", headersOrBodyResponse},
		{&extprocv3.BodyResponse{}, "response", headersOrBodyResponse},
		{&extprocv3.CommonResponse{}, "header_mutation", commonHeaderMutation},
		{&extprocv3.CommonResponse{}, "body_mutation", commonBodyMutation},
		{&extprocv3.HeaderMutation{}, "set_headers", mutationSetHeaders},
		{&corev3.HeaderValueOption{}, "header", optionHeader},
		{&corev3.HeaderValue{}, "key", headerKey},
		{&extprocv3.BodyMutation{}, "body", bodyReplaced},
		{&extprocv3.BodyMutation{}, "clear_body", bodyCleared},
		{&extprocv3.BodyMutation{}, "streamed_response", bodyStreamed},
		{&extprocv3.StreamedBodyResponse{}, "end_of_stream", streamedEndOfStream},
		{&extprocv3.ImmediateResponse{}, "status", immediateStatus},
		{&extprocv3.ImmediateResponse{}, "body", immediateBody},
		{&typev3.HttpStatus{}, "code", statusCode},
	} {
		if got := field(tc.m, tc.name); got != tc.want {
			t.Errorf("%s.%s is field %d, answer reads %d", tc.m.ProtoReflect().Descriptor().FullName(), tc.name, got, tc.want)
		}
	}
}

// referenceAnswer is what answer.decode must find, read from the decoded message.
func referenceAnswer(r *extprocv3.ProcessingResponse) answer {
	var a answer
	if f := r.ProtoReflect().WhichOneof(responseOneof); f != nil {
		a.kind = f.Number()
	}
	var c *extprocv3.CommonResponse
	switch v := r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		c = v.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		c = v.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		c = v.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		c = v.ResponseBody.GetResponse()
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		a.status = int32(v.ImmediateResponse.GetStatus().GetCode())
		b := v.ImmediateResponse.GetBody()
		a.body = string(b[:min(len(b), answerBodyKept)])
	}
	for _, o := range c.GetHeaderMutation().GetSetHeaders() {
		a.routed = a.routed || o.GetHeader().GetKey() == gateway.DestinationHeader
	}
	if sr := c.GetBodyMutation().GetStreamedResponse(); sr != nil {
		a.streamed, a.end = true, sr.GetEndOfStream()
	}
	return a
}

// randomAnswer is a ProcessingResponse of a random kind with random parts, some of them
// what a picker sends (a destination header, scores in the dynamic metadata, a body sent
// back as a streamed response).
func randomAnswer(rng *rand.Rand) *extprocv3.ProcessingResponse {
	common := func() *extprocv3.CommonResponse {
		c := &extprocv3.CommonResponse{ClearRouteCache: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			hm := &extprocv3.HeaderMutation{RemoveHeaders: []string{"x-drop"}}
			for range rng.IntN(4) {
				key := []string{gateway.DestinationHeader, "x-request-id", "x-gateway-destination-endpoint-x", ""}[rng.IntN(4)]
				hm.SetHeaders = append(hm.SetHeaders, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte("10.0.0.1:8000")}})
			}
			c.HeaderMutation = hm
		}
		switch rng.IntN(4) {
		case 0:
			c.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
				Body: []byte(strings.Repeat("b", rng.IntN(300))), EndOfStream: rng.IntN(2) == 0}}}
		case 1:
			c.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("replaced")}}
		case 2:
			c.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
		}
		return c
	}
	r := &extprocv3.ProcessingResponse{}
	switch rng.IntN(8) {
	case 0:
		r.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: common()}}
	case 1:
		r.Response = &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: common()}}
	case 2:
		r.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common()}}
	case 3:
		r.Response = &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: common()}}
	case 4:
		r.Response = &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(400 + rng.IntN(200))}, Body: []byte(strings.Repeat("e", rng.IntN(200))), Details: "d"}}
	case 5:
		r.Response = &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}
	case 6:
		r.Response = &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}
	}
	if rng.IntN(2) == 0 {
		md, _ := structpb.NewStruct(map[string]any{"envoy.lb": map[string]any{"x-gateway-destination-endpoint": "10.0.0.1:8000",
			"scores": map[string]any{"10.0.0.1:8000": 0.5, "10.0.0.2:8000": -0.25}}})
		r.DynamicMetadata = md
	}
	return r
}

func TestAnswerReadsWhatTheMessageSays(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := map[protowire.Number]int{}
	for range 5000 {
		r := randomAnswer(rng)
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var a answer
		a.routed, a.body = true, "left over" // decode resets what an earlier answer set
		if err := a.decode(b); err != nil {
			t.Fatalf("decode %v: %v", r, err)
		}
		if want := referenceAnswer(r); a != want {
			t.Fatalf("decode %v = %+v, want %+v", r, a, want)
		}
		kinds[a.kind]++
	}
	if len(kinds) != 8 {
		t.Fatalf("the random answers covered kinds %v, want all 8 (7 and none)", kinds)
	}
}

// TestAnswerMergesAsProtoDoes: fields repeated on the wire merge as the proto decoder
// merges them: the last member of a oneof and the last value of a field win.
func TestAnswerMergesAsProtoDoes(t *testing.T) {
	msg := func(num protowire.Number, parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	boolean := func(num protowire.Number, v bool) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), protowire.EncodeBool(v))
	}
	option := func(keys ...string) []byte { // a HeaderValueOption whose header's key is set once per key
		var hv []byte
		for _, k := range keys {
			hv = append(hv, str(headerKey, k)...)
		}
		return msg(mutationSetHeaders, msg(optionHeader, hv))
	}
	headers := func(opts ...[]byte) []byte {
		return msg(respRequestHeaders, msg(headersOrBodyResponse, msg(commonHeaderMutation, opts...)))
	}
	streamed := func(end bool) []byte { return msg(bodyStreamed, boolean(streamedEndOfStream, end)) }
	body := func(mutations ...[]byte) []byte {
		return msg(respRequestBody, msg(headersOrBodyResponse, msg(commonBodyMutation, mutations...)))
	}
	for _, tc := range []struct {
		name string
		wire []byte
	}{
		{"a key overwritten by another", headers(option(gateway.DestinationHeader, "x-other"))},
		{"another key overwritten by the destination", headers(option("x-other", gateway.DestinationHeader))},
		{"two options, one the destination", headers(option("x-other"), option(gateway.DestinationHeader))},
		{"headers then body: the body wins", append(headers(option(gateway.DestinationHeader)), body(streamed(true))...)},
		{"a streamed response then a replaced body", body(streamed(true), str(bodyReplaced, "replaced"))},
		{"a replaced body then a streamed response", body(str(bodyReplaced, "replaced"), streamed(false))},
		{"end_of_stream set then cleared", body(streamed(true), streamed(false))},
		{"a streamed response then a cleared body", body(streamed(true), boolean(bodyCleared, true))},
		// A known field on the wrong wire type is an unknown field: the oneof is unchanged.
		{"a streamed response then a body of the wrong wire type", body(streamed(true), boolean(bodyReplaced, true))},
		{"a streamed response then clear_body of the wrong wire type", body(streamed(true), str(bodyCleared, "x"))},
	} {
		var r extprocv3.ProcessingResponse
		if err := proto.Unmarshal(tc.wire, &r); err != nil {
			t.Fatalf("%s: the proto decoder refuses the case: %v", tc.name, err)
		}
		var a answer
		if err := a.decode(tc.wire); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if want := referenceAnswer(&r); a != want {
			t.Errorf("%s: decode = %+v, the proto decoder reads %+v", tc.name, a, want)
		}
	}
}

func TestAnswerRefusesBytesThatAreNotAMessage(t *testing.T) {
	good, _ := proto.Marshal(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}})
	for _, b := range [][]byte{
		{0x1a},                                  // request_body, its length missing
		{0x1a, 0x05, 0x0a},                      // a length past the end
		{0x00},                                  // field number 0
		{0x1a, 0x02, 0x0a, 0x05},                // a CommonResponse whose length is past its end
		append(append([]byte{}, good...), 0xff), // a truncated varint tag after a good message
	} {
		var a answer
		if err := a.decode(b); err == nil || !strings.Contains(err.Error(), "not a valid ProcessingResponse") {
			t.Errorf("decode(%x) = %v, want an error naming the answer", b, err)
		}
	}
}

// FuzzAnswer: on any bytes decode never panics, and it agrees with the proto decoder on
// every message that decoder accepts.
func FuzzAnswer(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		b, _ := proto.Marshal(randomAnswer(rng))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var a answer
		err := a.decode(b)
		var r extprocv3.ProcessingResponse
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		if err != nil {
			t.Fatalf("the proto decoder accepts %x, decode says %v", b, err)
		}
		if want := referenceAnswer(&r); a != want {
			t.Fatalf("decode(%x) = %+v, the proto decoder reads %+v", b, a, want)
		}
	})
}
