package extproc

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// routingAnswer is a routing answer, kept between streams (Server.answers) with its buffers:
// gRPC has encoded an answer when Send returns and keeps nothing of it. build encodes the
// answer's bytes directly (wire), and grpcbuf's codec sends them as they are (Encoder):
// protobuf's Size and Marshal over the answer's seven nested messages took about 2 µs a
// request (decision 1203). A codec that marshals through protobuf gets the messages
// (ProtoReflect), built from the same parts on its first call; built from separate
// messages, they took a dozen allocations per request (decision 1175).
type routingAnswer struct {
	// the answer as messages, built by ProtoReflect when built is false
	resp      extprocv3.ProcessingResponse
	inHeaders extprocv3.ProcessingResponse_RequestHeaders
	inBody    extprocv3.ProcessingResponse_RequestBody
	headers   extprocv3.HeadersResponse
	body      extprocv3.BodyResponse
	common    extprocv3.CommonResponse
	mutation  extprocv3.HeaderMutation
	set       [3]*corev3.HeaderValueOption
	options   [3]corev3.HeaderValueOption
	values    [3]corev3.HeaderValue
	built     bool

	// the parts build was given: the set headers (keys[:n], their values raw[ends[i-1]:ends[i]])
	keys    [3]string
	ends    [3]int
	n       int
	answer  bool   // in the request body response, not the headers response
	raw     []byte // the set headers' values, end to end
	md      metadataBuf
	unknown []byte // the dynamic_metadata field, encoded
	wire    []byte // the whole answer, encoded
}

// Field numbers of the messages of a routing answer (ext_proc v3 and core v3).
const (
	respRequestHeaders     = 1 // ProcessingResponse.request_headers: HeadersResponse
	respRequestBody        = 3 // ProcessingResponse.request_body: BodyResponse
	bodyOrHeadersResponse  = 1 // HeadersResponse.response, BodyResponse.response: CommonResponse
	commonHeaderMutation   = 2 // CommonResponse.header_mutation
	commonClearRouteCache  = 5 // CommonResponse.clear_route_cache: bool
	mutationSetHeaders     = 1 // HeaderMutation.set_headers: repeated HeaderValueOption
	optionHeader           = 1 // HeaderValueOption.header: HeaderValue
	optionAppendAction     = 3 // HeaderValueOption.append_action: enum
	headerValueKey         = 1 // HeaderValue.key: string
	headerValueRaw         = 3 // HeaderValue.raw_value: bytes
	overwriteIfExistsOrAdd = uint64(corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)
)

// build makes a the routing answer to d, whose endpoints are dest (joined by commas): dest
// as DestinationHeader, requestID (when not empty) as RequestIDHeader and d's rank (when it
// pins one) as RankHeader, all overwrite-or-add with raw values; ClearRouteCache; and the
// dynamic metadata (metadataBuf.appendRouting). The answer is the request headers response,
// or the request body response when inBody. It returns a, valid until a's next build.
func (a *routingAnswer) build(dest, requestID string, d *picker.Decision, omitScores, inBody bool) *routingAnswer {
	raw := append(a.raw[:0], dest...)
	a.keys[0], a.ends[0], a.n = DestinationHeader, len(raw), 1
	if requestID != "" {
		raw = append(raw, requestID...)
		a.keys[a.n], a.ends[a.n] = RequestIDHeader, len(raw)
		a.n++
	}
	if rank, ok := d.Rank(); ok {
		raw = strconv.AppendInt(raw, int64(rank), 10)
		a.keys[a.n], a.ends[a.n] = RankHeader, len(raw)
		a.n++
	}
	a.raw, a.answer, a.built = raw, inBody, false
	a.unknown = a.md.appendRouting(a.unknown[:0], dest, d, omitScores)
	a.wire = a.encode(a.wire[:0])
	return a
}

// value is the raw value of the i-th set header.
func (a *routingAnswer) value(i int) []byte {
	start := 0
	if i > 0 {
		start = a.ends[i-1]
	}
	return a.raw[start:a.ends[i]:a.ends[i]]
}

// encode appends the answer's protobuf encoding to b: the bytes protobuf's Marshal writes for
// the messages ProtoReflect builds (fields in number order, a proto3 field at its zero value
// left out, the unknown fields last), which TestRoutingAnswerReused holds it to.
func (a *routingAnswer) encode(b []byte) []byte {
	var values, options [3]int // each HeaderValue's and HeaderValueOption's length
	mutation := 0
	for i := range a.n {
		hv := protowire.SizeTag(headerValueKey) + protowire.SizeBytes(len(a.keys[i]))
		if v := a.value(i); len(v) > 0 {
			hv += protowire.SizeTag(headerValueRaw) + protowire.SizeBytes(len(v))
		}
		values[i] = hv
		options[i] = protowire.SizeTag(optionHeader) + protowire.SizeBytes(hv) +
			protowire.SizeTag(optionAppendAction) + protowire.SizeVarint(overwriteIfExistsOrAdd)
		mutation += protowire.SizeTag(mutationSetHeaders) + protowire.SizeBytes(options[i])
	}
	common := protowire.SizeTag(commonHeaderMutation) + protowire.SizeBytes(mutation) +
		protowire.SizeTag(commonClearRouteCache) + protowire.SizeVarint(1)
	field := protowire.Number(respRequestHeaders)
	if a.answer {
		field = respRequestBody
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(bodyOrHeadersResponse)+protowire.SizeBytes(common)))
	b = protowire.AppendTag(b, bodyOrHeadersResponse, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(common))
	b = protowire.AppendTag(b, commonHeaderMutation, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(mutation))
	for i := range a.n {
		b = protowire.AppendTag(b, mutationSetHeaders, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(options[i]))
		v := a.value(i)
		b = protowire.AppendTag(b, optionHeader, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(values[i]))
		b = appendString(b, headerValueKey, a.keys[i])
		if len(v) > 0 {
			b = appendBytes(b, headerValueRaw, v)
		}
		b = protowire.AppendTag(b, optionAppendAction, protowire.VarintType)
		b = protowire.AppendVarint(b, overwriteIfExistsOrAdd)
	}
	b = protowire.AppendTag(b, commonClearRouteCache, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	return append(b, a.unknown...)
}

// EncodedSize and AppendEncoded implement grpcbuf.Encoder: the answer's bytes as build
// encoded them.
func (a *routingAnswer) EncodedSize() int { return len(a.wire) }

// AppendEncoded appends the answer's encoding to b.
func (a *routingAnswer) AppendEncoded(b []byte) []byte { return append(b, a.wire...) }

// ProtoReflect makes a routingAnswer a proto.Message, for a codec that marshals through
// protobuf: the answer's messages, built from build's parts on the first call after it.
func (a *routingAnswer) ProtoReflect() protoreflect.Message {
	if !a.built {
		a.buildMessages()
		a.built = true
	}
	return a.resp.ProtoReflect()
}

// buildMessages fills the answer's messages from build's parts.
func (a *routingAnswer) buildMessages() {
	for i := range a.n {
		v, o := &a.values[i], &a.options[i]
		v.Key, v.RawValue = a.keys[i], a.value(i)
		o.Header, o.AppendAction = v, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		a.set[i] = o
	}
	a.mutation.SetHeaders = a.set[:a.n]
	a.common.ClearRouteCache, a.common.HeaderMutation = true, &a.mutation
	if a.answer {
		a.body.Response, a.inBody.RequestBody, a.resp.Response = &a.common, &a.body, &a.inBody
	} else {
		a.headers.Response, a.inHeaders.RequestHeaders, a.resp.Response = &a.common, &a.headers, &a.inHeaders
	}
	a.resp.ProtoReflect().SetUnknown(a.unknown)
}
