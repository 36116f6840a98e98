package extload

import (
	"errors"
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/loadaware/loadaware-epp/bench/gateway"
)

// The generator reads the server's answers (ProcessingResponse messages) with answerCodec
// into an answer: a walk over the wire bytes that keeps the few fields Exchange checks and
// skips the rest (the dynamic metadata, the bodies sent back) without decoding or copying
// them. Envoy decodes all of an answer, but on its own workers; here the generator's CPU
// per answer is part of every round trip it measures, so a server whose answers carry more
// (the picker's scores, every body sent back) would be charged for the generator's Go
// decoding of them (decision 1124). What is sent is encoded by the proto codec as before.

// answer is what Exchange reads of one ProcessingResponse.
type answer struct {
	kind     protowire.Number // the field of the response oneof that is set; 0: none
	routed   bool             // a header mutation sets gateway.DestinationHeader
	streamed bool             // the body mutation is a streamed_response
	end      bool             // that streamed_response has end_of_stream
	status   int32            // immediate_response: its status code
	body     string           // immediate_response: its body, at most answerBodyKept bytes
}

// Field numbers of envoy.service.ext_proc.v3 (external_processor.proto) and the messages
// it uses that answer reads; TestAnswerFieldNumbers holds them to the descriptors.
const (
	respRequestHeaders    protowire.Number = 1 // ProcessingResponse, HeadersResponse
	respResponseHeaders   protowire.Number = 2
	respRequestBody       protowire.Number = 3 // BodyResponse
	respResponseBody      protowire.Number = 4
	respImmediateResponse protowire.Number = 7

	headersOrBodyResponse protowire.Number = 1 // HeadersResponse.response, BodyResponse.response
	commonHeaderMutation  protowire.Number = 2 // CommonResponse
	commonBodyMutation    protowire.Number = 3
	mutationSetHeaders    protowire.Number = 1 // HeaderMutation
	optionHeader          protowire.Number = 1 // HeaderValueOption
	headerKey             protowire.Number = 1 // HeaderValue
	bodyReplaced          protowire.Number = 1 // BodyMutation.body
	bodyCleared           protowire.Number = 2 // BodyMutation.clear_body
	bodyStreamed          protowire.Number = 3 // BodyMutation.streamed_response
	streamedEndOfStream   protowire.Number = 2 // StreamedBodyResponse
	immediateStatus       protowire.Number = 1 // ImmediateResponse
	immediateBody         protowire.Number = 3
	statusCode            protowire.Number = 1 // envoy.type.v3.HttpStatus
)

// responseOneof is ProcessingResponse's oneof "response": which answer it is.
var responseOneof = (&extprocv3.ProcessingResponse{}).ProtoReflect().Descriptor().Oneofs().ByName("response")

// answerKind names a member of the oneof, for an error.
func answerKind(n protowire.Number) string {
	if f := responseOneof.Fields().ByNumber(n); f != nil {
		return string(f.Name())
	}
	if n == 0 {
		return "empty"
	}
	return fmt.Sprintf("field %d", n)
}

// answerBodyKept bounds the immediate response body an answer keeps (for the error).
const answerBodyKept = 120

// answerCodec is the proto codec, except that it reads a ProcessingResponse into an
// *answer.
type answerCodec struct{ proto encoding.CodecV2 }

func newAnswerCodec() answerCodec { return answerCodec{proto: encoding.GetCodecV2("proto")} }

func (c answerCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c answerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	a, ok := v.(*answer)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return a.decode(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return a.decode(buf.ReadOnlyData())
}

// Name is the proto codec's, so the content-subtype on the wire is unchanged.
func (c answerCodec) Name() string { return c.proto.Name() }

var errAnswerWire = errors.New("extload: the server's answer is not a valid ProcessingResponse")

// decode reads a ProcessingResponse's wire bytes into a (reset first). It keeps nothing of
// b: the gRPC buffer is reused once it returns.
func (a *answer) decode(b []byte) error {
	*a = answer{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		if responseOneof.Fields().ByNumber(num) != nil && num != a.kind {
			*a = answer{kind: num} // another member of the oneof: the last one set wins
		}
		switch num {
		case respRequestHeaders, respResponseHeaders, respRequestBody, respResponseBody:
			return each(v, headersOrBodyResponse, a.common)
		case respImmediateResponse:
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch {
				case num == immediateStatus && typ == protowire.BytesType:
					return varints(v, statusCode, func(x uint64) { a.status = int32(x) })
				case num == immediateBody && typ == protowire.BytesType:
					a.body = string(v[:min(len(v), answerBodyKept)])
				}
				return nil
			})
		}
		return nil // the oneof's other members (kind set above), the metadata, ...
	})
}

// common reads a CommonResponse.
func (a *answer) common(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case commonHeaderMutation:
			return each(v, mutationSetHeaders, func(option []byte) error {
				// A HeaderValueOption: its header's key is the last one set (repeated
				// occurrences of a message field merge).
				dest := false
				err := each(option, optionHeader, func(header []byte) error {
					return each(header, headerKey, func(key []byte) error {
						dest = string(key) == gateway.DestinationHeader
						return nil
					})
				})
				a.routed = a.routed || dest
				return err
			})
		case commonBodyMutation:
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch {
				case num == bodyReplaced && typ == protowire.BytesType, num == bodyCleared && typ == protowire.VarintType:
					a.streamed, a.end = false, false // another member of the oneof: the last one set wins
				case num == bodyStreamed && typ == protowire.BytesType:
					a.streamed = true
					return varints(v, streamedEndOfStream, func(x uint64) { a.end = x != 0 })
				}
				return nil
			})
		}
		return nil
	})
}

// each calls f with the content of every length-delimited field num of the message b.
func each(b []byte, num protowire.Number, f func([]byte) error) error {
	return fields(b, func(n protowire.Number, typ protowire.Type, v []byte) error {
		if n != num || typ != protowire.BytesType {
			return nil
		}
		return f(v)
	})
}

// varints calls f with the value of every varint field num of the message b.
func varints(b []byte, num protowire.Number, f func(uint64)) error {
	return fields(b, func(n protowire.Number, typ protowire.Type, v []byte) error {
		if n == num && typ == protowire.VarintType {
			x, _ := protowire.ConsumeVarint(v)
			f(x)
		}
		return nil
	})
}

// fields calls f with each field of the message b: its number, wire type and value bytes
// (a varint's own bytes; a length-delimited field's content). It stops at f's first error
// and reports bytes that are not a message's wire form.
func fields(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errAnswerWire, protowire.ParseError(n))
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return fmt.Errorf("%w: %v", errAnswerWire, protowire.ParseError(n))
		}
		v := b[:n]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v) // its length was checked just above
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
