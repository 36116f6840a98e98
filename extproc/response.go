package extproc

import (
	"fmt"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
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

// bodyAnswer is a StreamedBodyResponse answer's messages in one allocation, kept between
// chunks (Server.bodyAnswers): built from separate messages it took seven allocations per
// body chunk passed through in full-duplex mode, request or response (decision 1175).
type bodyAnswer struct {
	resp     extprocv3.ProcessingResponse
	request  extprocv3.ProcessingResponse_RequestBody
	response extprocv3.ProcessingResponse_ResponseBody
	body     extprocv3.BodyResponse
	common   extprocv3.CommonResponse
	mutation extprocv3.BodyMutation
	streamed extprocv3.BodyMutation_StreamedResponse
	chunk    extprocv3.StreamedBodyResponse
}

// sendStreamed sends b as a request (or response) StreamedBodyResponse ending the body when
// eos. The answer it sends from goes back to the pool without b.
func (st *stream) sendStreamed(request bool, b []byte, eos bool) error {
	a, _ := st.s.bodyAnswers.Get().(*bodyAnswer)
	if a == nil {
		a = new(bodyAnswer)
	}
	a.chunk.Body, a.chunk.EndOfStream = b, eos
	a.streamed.StreamedResponse = &a.chunk
	a.mutation.Mutation = &a.streamed
	a.common.BodyMutation = &a.mutation
	a.body.Response = &a.common
	if request {
		a.request.RequestBody, a.resp.Response = &a.body, &a.request
	} else {
		a.response.ResponseBody, a.resp.Response = &a.body, &a.response
	}
	err := st.send(&a.resp)
	a.chunk.Body = nil
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
