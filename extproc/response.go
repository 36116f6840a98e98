package extproc

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// streamedBody is a request (or response) StreamedBodyResponse.
func streamedBody(request bool, b []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

func (st *stream) responseHeaders(h *extprocv3.HttpHeaders) error {
	hr := &extprocv3.HeadersResponse{}
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
	if st.explain && st.decision.Booking != nil {
		hr.Response = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			setHeader(DecisionHeader, st.decision.Explain())}}}
	}
	if h.GetEndOfStream() {
		st.release()
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: hr}})
}

func (st *stream) responseBody(b *extprocv3.HttpBody) error {
	if bk := st.decision.Booking; bk != nil {
		bk.Decoding()
	}
	if b.GetEndOfStream() {
		st.release()
	}
	if st.respMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return st.send(streamedBody(false, b.GetBody(), b.GetEndOfStream()))
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{}}})
}
