package extproc

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file is the stream's decoding of Envoy's messages (decision 1197). proto.Unmarshal
// copies every bytes field out of the received buffer: the request body (8 KiB and more)
// and each header's raw value, 6 µs a request in extload's profile. A received message
// here decodes itself from the buffer instead when the server's codec offers it
// (grpcbuf.Aliasing): its bodies and raw header values point into the buffer, which the
// stream frees once it is done with the message (release).
//
// The decoder reads the messages Envoy sends on the request path: headers, bodies and
// trailers with the protocol configuration and metadata beside them. Anything else (an
// unknown field, a field with an unexpected wire type, a repeated singular field, invalid
// UTF-8 in a string, the deprecated attributes maps) makes it give up, and the message is
// decoded by proto.Unmarshal from the same bytes: the result is always the message
// proto.Unmarshal would give, with the same error for a malformed one (FuzzDecodeRequest).

// received is one message of the stream. ProcessingRequest is what it decoded; while buf
// is set, its bytes fields may point into buf, and must not be read after release. parts,
// once set, are the structures the decoder fills: the message's, reused for the next
// message after release (the stream keeps them across its requests). wire is the length of
// the bytes it was decoded from (the length in the gRPC message's prefix), or 0 when a codec
// without aliasing decoded it and the length is not known.
type received struct {
	*extprocv3.ProcessingRequest
	buf   mem.Buffer
	parts *parts
	wire  int
}

// UnmarshalAliasing implements grpcbuf.Aliasing: it decodes buf into r's parts (a
// ProcessingRequest whose bytes fields point into buf) and keeps buf until release. When
// the decoder gives up, proto.Unmarshal decodes into a new ProcessingRequest, copying what
// it keeps, and buf is freed at once.
func (r *received) UnmarshalAliasing(buf mem.Buffer) error {
	if r.parts == nil {
		r.parts = new(parts)
	}
	r.parts.clear() // a no-op after release
	r.ProcessingRequest = nil
	r.buf = nil
	b := buf.ReadOnlyData()
	r.wire = len(b)
	if m := r.parts.request(); decodeInto(b, m, r.parts) {
		r.ProcessingRequest = m
		r.buf = buf
		return nil
	}
	r.parts.clear()
	r.ProcessingRequest = new(extprocv3.ProcessingRequest)
	err := proto.Unmarshal(b, r.ProcessingRequest)
	buf.Free()
	return err
}

// ProtoReflect makes a received a proto.Message, for a codec that does not offer
// aliasing: protobuf then decodes into a new ProcessingRequest, copying.
func (r *received) ProtoReflect() protoreflect.Message {
	if r.ProcessingRequest == nil {
		r.ProcessingRequest = new(extprocv3.ProcessingRequest)
		r.wire = 0
	}
	return r.ProcessingRequest.ProtoReflect()
}

// wireSize is the message's wire length: the length of the bytes it was decoded from when
// known, else proto.Size of what was decoded (the same for the canonical encoding Envoy
// sends). Taking it from the decode spares a walk of the message per body message
// (decision 1203).
func (r *received) wireSize() int {
	if r.wire > 0 {
		return r.wire
	}
	return proto.Size(r.ProcessingRequest)
}

// release frees the buffer the message points into, if any, and clears the parts it was
// decoded into: none of the message's fields may be read after.
func (r *received) release() {
	if r.buf != nil {
		r.buf.Free()
		r.buf = nil
	}
	if r.parts != nil {
		r.parts.clear()
	}
	r.ProcessingRequest = nil
	r.wire = 0
}

// maxKeptHeaders bounds the header values parts keep for reuse: a message with more gets
// a slab of its own, so that one request with many headers leaves no large slab behind.
const maxKeptHeaders = 64

// parts are the structures one message is decoded into, allocated once and reused: a
// message (of any kind) holds at most one of each. Between messages they are zero (clear),
// so that nothing of a message outlives its release. A message's decoding then allocates
// only what is copied out of the buffer: header names that are not headerKey's constants,
// values sent as strings, and the metadata (decoded by protobuf).
type parts struct {
	used bool // something below is filled: clear has work to do
	req  extprocv3.ProcessingRequest

	reqHeaders   extprocv3.ProcessingRequest_RequestHeaders
	respHeaders  extprocv3.ProcessingRequest_ResponseHeaders
	reqBody      extprocv3.ProcessingRequest_RequestBody
	respBody     extprocv3.ProcessingRequest_ResponseBody
	reqTrailers  extprocv3.ProcessingRequest_RequestTrailers
	respTrailers extprocv3.ProcessingRequest_ResponseTrailers

	headers  extprocv3.HttpHeaders
	body     extprocv3.HttpBody
	trailers extprocv3.HttpTrailers
	hmap     corev3.HeaderMap
	protocol extprocv3.ProtocolConfiguration

	values  []corev3.HeaderValue  // the slab of hmap's values; len is what clear must zero
	pointer []*corev3.HeaderValue // hmap.Headers' backing array, pointing into values
}

// request is the ProcessingRequest to decode into, marking the parts in use.
func (p *parts) request() *extprocv3.ProcessingRequest {
	p.used = true
	return &p.req
}

// clear zeroes every part, keeping the slabs' memory.
func (p *parts) clear() {
	if !p.used {
		return
	}
	clear(p.values)
	clear(p.pointer)
	*p = parts{values: p.values[:0], pointer: p.pointer[:0]}
}

// headerSlabs are count header values and their pointers: from the parts up to
// maxKeptHeaders, else new.
func (p *parts) headerSlabs(count int) ([]corev3.HeaderValue, []*corev3.HeaderValue) {
	if count > maxKeptHeaders {
		return make([]corev3.HeaderValue, count), make([]*corev3.HeaderValue, count)
	}
	if cap(p.values) < count {
		p.values, p.pointer = make([]corev3.HeaderValue, 0, count), make([]*corev3.HeaderValue, 0, count)
	}
	p.values, p.pointer = p.values[:count], p.pointer[:count]
	return p.values, p.pointer
}

// subUnmarshal decodes the field the decoder leaves to protobuf (the metadata): one level
// below the message, so one level less deep.
var subUnmarshal = proto.UnmarshalOptions{RecursionLimit: protowire.DefaultRecursionLimit - 1}

// decodeRequest decodes b into m, which must be empty, and reports true; bytes fields point
// into b. It reports false, leaving m partly filled, for anything it does not read as
// proto.Unmarshal would.
func decodeRequest(b []byte, m *extprocv3.ProcessingRequest) bool {
	return decodeInto(b, m, new(parts))
}

// decodeInto is decodeRequest with m's nested messages taken from p, which must be clear.
func decodeInto(b []byte, m *extprocv3.ProcessingRequest, p *parts) bool {
	for len(b) > 0 {
		num, typ, x, v, rest, ok := protoField(b)
		if !ok {
			return false
		}
		b = rest
		if typ == protowire.VarintType {
			if num != 10 {
				return false
			}
			m.ObservabilityMode = x != 0
			continue
		}
		switch num {
		case 2, 3, 4, 5, 6, 7: // the request oneof
			if m.Request != nil || !decodeOneof(num, v, m, p) {
				return false
			}
		case 8:
			if m.MetadataContext != nil {
				return false
			}
			m.MetadataContext = new(corev3.Metadata)
			if subUnmarshal.Unmarshal(v, m.MetadataContext) != nil {
				return false
			}
		case 11:
			if m.ProtocolConfig != nil {
				return false
			}
			m.ProtocolConfig = &p.protocol
			if !decodeProtocol(v, m.ProtocolConfig) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// decodeOneof decodes v, field num of ProcessingRequest's request oneof, into m.Request,
// with its parts from p.
func decodeOneof(num protowire.Number, v []byte, m *extprocv3.ProcessingRequest, p *parts) bool {
	switch num {
	case 2, 3:
		h := &p.headers
		if !decodeHeaders(v, h, p) {
			return false
		}
		if num == 2 {
			p.reqHeaders.RequestHeaders, m.Request = h, &p.reqHeaders
		} else {
			p.respHeaders.ResponseHeaders, m.Request = h, &p.respHeaders
		}
	case 4, 5:
		h := &p.body
		if !decodeBody(v, h) {
			return false
		}
		if num == 4 {
			p.reqBody.RequestBody, m.Request = h, &p.reqBody
		} else {
			p.respBody.ResponseBody, m.Request = h, &p.respBody
		}
	default: // 6, 7
		h := &p.trailers
		if !decodeTrailers(v, h, p) {
			return false
		}
		if num == 6 {
			p.reqTrailers.RequestTrailers, m.Request = h, &p.reqTrailers
		} else {
			p.respTrailers.ResponseTrailers, m.Request = h, &p.respTrailers
		}
	}
	return true
}

// protoField reads one field of b: its number and type, its value as a varint (VarintType) or
// bytes (BytesType), and the rest of b; ok is false for any other type or a malformed field.
func protoField(b []byte) (num protowire.Number, typ protowire.Type, x uint64, v, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, 0, nil, nil, false
	}
	b = b[n:]
	switch typ {
	case protowire.VarintType:
		x, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		v, n = protowire.ConsumeBytes(b)
	default:
		return 0, 0, 0, nil, nil, false
	}
	if n < 0 {
		return 0, 0, 0, nil, nil, false
	}
	return num, typ, x, v, b[n:], true
}

// decodeHeaders decodes an HttpHeaders (headers 1, end_of_stream 3).
func decodeHeaders(b []byte, h *extprocv3.HttpHeaders, p *parts) bool {
	for len(b) > 0 {
		num, typ, x, v, rest, ok := protoField(b)
		if !ok {
			return false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType && h.Headers == nil:
			h.Headers = &p.hmap
			if !decodeHeaderMap(v, h.Headers, p) {
				return false
			}
		case num == 3 && typ == protowire.VarintType:
			h.EndOfStream = x != 0
		default:
			return false
		}
	}
	return true
}

// decodeTrailers decodes an HttpTrailers (trailers 1).
func decodeTrailers(b []byte, h *extprocv3.HttpTrailers, p *parts) bool {
	for len(b) > 0 {
		num, typ, _, v, rest, ok := protoField(b)
		if !ok || num != 1 || typ != protowire.BytesType || h.Trailers != nil {
			return false
		}
		b = rest
		h.Trailers = &p.hmap
		if !decodeHeaderMap(v, h.Trailers, p) {
			return false
		}
	}
	return true
}

// decodeProtocol decodes a ProtocolConfiguration: the two body modes (1, 2; enums, read as
// protobuf reads an open enum's varint) and send_body_without_waiting_for_header_response (3).
func decodeProtocol(b []byte, p *extprocv3.ProtocolConfiguration) bool {
	for len(b) > 0 {
		num, typ, x, _, rest, ok := protoField(b)
		if !ok || typ != protowire.VarintType {
			return false
		}
		b = rest
		switch num {
		case 1:
			p.RequestBodyMode = filterv3.ProcessingMode_BodySendMode(int32(x))
		case 2:
			p.ResponseBodyMode = filterv3.ProcessingMode_BodySendMode(int32(x))
		case 3:
			p.SendBodyWithoutWaitingForHeaderResponse = x != 0
		default:
			return false
		}
	}
	return true
}

// decodeBody decodes an HttpBody: the body (1) points into b; the four flags (2-5) are
// booleans.
func decodeBody(b []byte, h *extprocv3.HttpBody) bool {
	for len(b) > 0 {
		num, typ, x, v, rest, ok := protoField(b)
		if !ok {
			return false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			h.Body = alias(v)
		case num == 2 && typ == protowire.VarintType:
			h.EndOfStream = x != 0
		case num == 3 && typ == protowire.VarintType:
			h.EndOfStreamWithoutMessage = x != 0
		case num == 4 && typ == protowire.VarintType:
			h.GrpcMessageCompressed = x != 0
		case num == 5 && typ == protowire.VarintType:
			h.DrainComplete = x != 0
		default:
			return false
		}
	}
	return true
}

// decodeHeaderMap decodes a HeaderMap: its repeated HeaderValues (1), held in one slab
// (p's, see headerSlabs) rather than one allocation each.
func decodeHeaderMap(b []byte, m *corev3.HeaderMap, p *parts) bool {
	count := 0
	for r := b; len(r) > 0; count++ {
		num, typ, _, _, rest, ok := protoField(r)
		if !ok || num != 1 || typ != protowire.BytesType {
			return false
		}
		r = rest
	}
	if count == 0 {
		return true
	}
	values, pointers := p.headerSlabs(count)
	m.Headers = pointers
	for i := range count {
		_, _, _, v, rest, _ := protoField(b)
		b = rest
		if !decodeHeaderValue(v, &values[i]) {
			return false
		}
		m.Headers[i] = &values[i]
	}
	return true
}

// decodeHeaderValue decodes a HeaderValue: key (1) and value (2) as UTF-8 strings, copied;
// raw_value (3) pointing into b.
func decodeHeaderValue(b []byte, h *corev3.HeaderValue) bool {
	for len(b) > 0 {
		num, typ, _, v, rest, ok := protoField(b)
		if !ok || typ != protowire.BytesType {
			return false
		}
		b = rest
		switch num {
		case 1, 2:
			if !utf8.Valid(v) {
				return false
			}
			if num == 1 {
				h.Key = headerKey(v)
			} else {
				h.Value = string(v)
			}
		case 3:
			h.RawValue = alias(v)
		default:
			return false
		}
	}
	return true
}

// headerKey is a header's name as a string: one of the names Envoy sends on most requests
// and responses without a copy (a constant), any other copied.
func headerKey(v []byte) string {
	switch string(v) { // compared, not converted
	case ":authority":
		return ":authority"
	case ":path":
		return ":path"
	case ":method":
		return ":method"
	case ":scheme":
		return ":scheme"
	case ":status":
		return ":status"
	case "content-type":
		return "content-type"
	case "content-length":
		return "content-length"
	case "x-request-id":
		return "x-request-id"
	case "x-forwarded-proto":
		return "x-forwarded-proto"
	case "x-forwarded-for":
		return "x-forwarded-for"
	case "x-envoy-internal":
		return "x-envoy-internal"
	case "x-envoy-expected-rq-timeout-ms":
		return "x-envoy-expected-rq-timeout-ms"
	case "user-agent":
		return "user-agent"
	case "accept":
		return "accept"
	case "accept-encoding":
		return "accept-encoding"
	case "authorization":
		return "authorization"
	case "date":
		return "date"
	case "server":
		return "server"
	case "x-envoy-upstream-service-time":
		return "x-envoy-upstream-service-time"
	}
	return string(v)
}

// alias is a bytes field's value pointing into the buffer: nil when empty, as protobuf
// leaves it, and with no capacity past its end, so that an append copies rather than
// writes into the buffer.
func alias(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return v[:len(v):len(v)]
}
