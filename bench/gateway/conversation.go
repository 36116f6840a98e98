package gateway

import (
	"net/http"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// The messages of one ext_proc stream as the gateway sends them, exported for load
// generators that play the conversation without the HTTP side (loadaware-bench extload).

// RequestHeadersMessage is a stream's first message: the request's headers as Envoy renders
// them (pseudo-headers first, then lower-case names in sorted order, values in raw_value,
// hop-by-hop headers left out) and the protocol configuration announcing mode for both
// bodies. hasBody false marks the headers as the end of the request.
func RequestHeadersMessage(mode BodyMode, method, path, authority, scheme string, h http.Header, hasBody bool) *extprocv3.ProcessingRequest {
	m := message{method: method, path: path, authority: authority, scheme: scheme, header: h}
	return &extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: bodySendMode(mode), ResponseBodyMode: bodySendMode(mode)},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: m.headerMap(false), EndOfStream: !hasBody,
		}},
	}
}

// ResponseHeadersMessage is the upstream response's headers, rendered as in
// RequestHeadersMessage after ":status".
func ResponseHeadersMessage(status int, h http.Header, hasBody bool) *extprocv3.ProcessingRequest {
	m := message{status: status, header: h}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: m.headerMap(true), EndOfStream: !hasBody},
	}}
}

// RequestBodyMessage is one chunk of the request body; eos marks the last.
func RequestBodyMessage(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos},
	}}
}

// ResponseBodyMessage is one chunk of the response body; eos marks the last.
func ResponseBodyMessage(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos},
	}}
}

func bodySendMode(m BodyMode) extprocfilterv3.ProcessingMode_BodySendMode {
	if m == Buffered {
		return extprocfilterv3.ProcessingMode_BUFFERED
	}
	return extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}
