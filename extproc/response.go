package extproc

import (
	"fmt"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The answers that carry nothing of their request are built and encoded once and shared by
// every stream: grpcbuf's codec sends their bytes (encodedResponse), and protobuf's Marshal
// (other codecs) only reads a message (its size cache is atomic), so they may be sent from
// any number of streams at once, and gRPC has encoded an answer when Send returns. They are
// never modified. A STREAMED request's chunks, the response's headers and its buffered body
// each took three allocations per message before (decision 1175), and then protobuf's Size
// and Marshal (decision 1203).
var (
	continueRequestHeaders = encoded(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{}}})
	continueRequestBody = encoded(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{}}})
	continueRequestTrailers = encoded(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}})
	continueResponseHeaders = encoded(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{}}})
	continueResponseBody = encoded(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{}}})
	continueResponseTrailers = encoded(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}})
)

// encodedResponse is a shared answer with its encoding: a proto.Message (the embedded
// response's) for a codec that marshals through protobuf, and a grpcbuf.Encoder sending
// wire for grpcbuf's.
type encodedResponse struct {
	*extprocv3.ProcessingResponse
	wire []byte
}

// encoded returns r with its encoding; r must not change afterwards.
func encoded(r *extprocv3.ProcessingResponse) *encodedResponse {
	wire, err := proto.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("extproc: encode a shared answer: %v", err))
	}
	return &encodedResponse{ProcessingResponse: r, wire: wire}
}

// EncodedSize implements grpcbuf.Encoder.
func (e *encodedResponse) EncodedSize() int { return len(e.wire) }

// AppendEncoded implements grpcbuf.Encoder.
func (e *encodedResponse) AppendEncoded(b []byte) []byte { return append(b, e.wire...) }

// bodyAnswer is a StreamedBodyResponse answer, kept between chunks (Server.bodyAnswers). It
// is sent as the encoding it writes itself (grpcbuf.Encoder: the chunk's bytes behind five
// tags and lengths, in place of protobuf's Size and Marshal over five nested messages,
// decision 1203), and is a proto.Message (its messages, built on ProtoReflect's first call)
// for a codec that marshals through protobuf. Built from separate messages it took seven
// allocations per body chunk passed through in full-duplex mode, request or response
// (decision 1175).
type bodyAnswer struct {
	chunk   []byte // the body chunk sent back; nil once sent
	eos     bool   // the chunk ends the body
	request bool   // a request body's answer, not a response body's
	built   bool   // the messages below hold this answer

	resp     extprocv3.ProcessingResponse
	inReq    extprocv3.ProcessingResponse_RequestBody
	inResp   extprocv3.ProcessingResponse_ResponseBody
	body     extprocv3.BodyResponse
	common   extprocv3.CommonResponse
	mutation extprocv3.BodyMutation
	streamed extprocv3.BodyMutation_StreamedResponse
	sbr      extprocv3.StreamedBodyResponse
}

// Field numbers of a body answer's messages (ext_proc v3).
const (
	respResponseBody    = 4 // ProcessingResponse.response_body: BodyResponse
	commonBodyMutation  = 3 // CommonResponse.body_mutation: BodyMutation
	mutationStreamed    = 3 // BodyMutation.streamed_response: StreamedBodyResponse
	streamedChunk       = 1 // StreamedBodyResponse.body: bytes
	streamedEndOfStream = 2 // StreamedBodyResponse.end_of_stream: bool
)

// sizes are the lengths of the answer's nested messages, innermost first: the
// StreamedBodyResponse, the BodyMutation, the CommonResponse, the BodyResponse.
func (a *bodyAnswer) sizes() (sbr, mutation, common, body int) {
	if len(a.chunk) > 0 {
		sbr = protowire.SizeTag(streamedChunk) + protowire.SizeBytes(len(a.chunk))
	}
	if a.eos {
		sbr += protowire.SizeTag(streamedEndOfStream) + protowire.SizeVarint(1)
	}
	mutation = protowire.SizeTag(mutationStreamed) + protowire.SizeBytes(sbr)
	common = protowire.SizeTag(commonBodyMutation) + protowire.SizeBytes(mutation)
	body = protowire.SizeTag(bodyOrHeadersResponse) + protowire.SizeBytes(common)
	return
}

// EncodedSize implements grpcbuf.Encoder.
func (a *bodyAnswer) EncodedSize() int {
	_, _, _, body := a.sizes()
	return protowire.SizeTag(respResponseBody) + protowire.SizeBytes(body)
}

// AppendEncoded implements grpcbuf.Encoder: the bytes protobuf's Marshal writes for the
// messages ProtoReflect builds (a proto3 field at its zero value left out), which
// TestBodyAnswerEncoding holds it to.
func (a *bodyAnswer) AppendEncoded(b []byte) []byte {
	sbr, mutation, common, body := a.sizes()
	field := protowire.Number(respResponseBody)
	if a.request {
		field = respRequestBody
	}
	for _, f := range [...]struct {
		num protowire.Number
		n   int
	}{{field, body}, {bodyOrHeadersResponse, common}, {commonBodyMutation, mutation}, {mutationStreamed, sbr}} {
		b = protowire.AppendTag(b, f.num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(f.n))
	}
	if len(a.chunk) > 0 {
		b = appendBytes(b, streamedChunk, a.chunk)
	}
	if a.eos {
		b = protowire.AppendTag(b, streamedEndOfStream, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

// ProtoReflect makes a bodyAnswer a proto.Message, for a codec that marshals through
// protobuf: the answer's messages, built on the first call after set.
func (a *bodyAnswer) ProtoReflect() protoreflect.Message {
	if !a.built {
		a.sbr.Body, a.sbr.EndOfStream = a.chunk, a.eos
		a.streamed.StreamedResponse = &a.sbr
		a.mutation.Mutation = &a.streamed
		a.common.BodyMutation = &a.mutation
		a.body.Response = &a.common
		if a.request {
			a.inReq.RequestBody, a.resp.Response = &a.body, &a.inReq
		} else {
			a.inResp.ResponseBody, a.resp.Response = &a.body, &a.inResp
		}
		a.built = true
	}
	return a.resp.ProtoReflect()
}

// set makes a the answer sending b back as a request (or response) body chunk, ending the
// body when eos.
func (a *bodyAnswer) set(request bool, b []byte, eos bool) *bodyAnswer {
	a.chunk, a.eos, a.request, a.built = b, eos, request, false
	return a
}

// forget drops what a holds of the chunk.
func (a *bodyAnswer) forget() {
	a.chunk, a.sbr.Body, a.built = nil, nil, false
}

// sendStreamed sends b as a request (or response) StreamedBodyResponse ending the body when
// eos. The answer it sends from goes back to the pool without b.
func (st *stream) sendStreamed(request bool, b []byte, eos bool) error {
	a, _ := st.s.bodyAnswers.Get().(*bodyAnswer)
	if a == nil {
		a = new(bodyAnswer)
	}
	err := st.send(a.set(request, b, eos))
	a.forget()
	st.s.bodyAnswers.Put(a)
	return err
}

func (st *stream) responseHeaders(h *extprocv3.HttpHeaders) error {
	if st.s.cfg.OnResponse != nil && len(st.decision.Endpoints) > 0 {
		for _, hv := range h.GetHeaders().GetHeaders() {
			if hv.GetKey() == ":status" {
				if code, err := strconv.Atoi(headerValue(hv)); err == nil {
					st.s.cfg.OnResponse(st.decision.Endpoints[0], code, st.decidedAt)
				}
				break
			}
		}
	}
	var answer proto.Message = continueResponseHeaders
	if st.explain && st.decision.Booking != nil {
		answer = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader(DecisionHeader, st.decision.Explain())}}}}}}
	}
	if h.GetEndOfStream() {
		st.release()
	}
	return st.send(answer)
}

func (st *stream) responseBody(b *extprocv3.HttpBody) error {
	if bk := st.decision.Booking; bk != nil {
		bk.Decoding()
	}
	if b.GetEndOfStream() {
		st.release()
	}
	if st.respMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return st.sendStreamed(false, b.GetBody(), b.GetEndOfStream())
	}
	return st.send(continueResponseBody)
}
