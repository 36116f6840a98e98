// Package extload is an open-loop load generator for ext_proc servers: it plays Envoy's
// full-duplex conversation for every request on its own stream (request headers, the body
// with end_of_stream, then the upstream response's headers and body, as Envoy sends them
// without waiting for answers), at a Poisson arrival rate, and records each stream's round
// trip. Beside it is Nothing, the do-nothing ext_proc server whose figures are the floor
// a real server is compared with, and the child-process protocol that lets each server run
// alone in its own process so its CPU time can be read honestly. PassThrough, which also sends
// every body back as Envoy's full-duplex mode needs, is the floor of a correct server.
//
// It measures; it does not judge. loadaware-bench extload turns its results into ratios.
package extload

import (
	"errors"
	"io"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Nothing is the do-nothing ext_proc server: every message gets the empty response of its
// kind (CONTINUE, no mutation), and the stream ends when the client half-closes it.
type Nothing struct {
	extprocv3.UnimplementedExternalProcessorServer
}

// Process answers every message of the stream with the empty response of its kind.
func (Nothing) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	return answerEach(srv, emptyResponse)
}

// answerEach sends answer(m) for every message m of the stream until the client half-closes it.
func answerEach(srv extprocv3.ExternalProcessor_ProcessServer, answer func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse) error {
	for {
		req, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := srv.Send(answer(req)); err != nil {
			return err
		}
	}
}

// emptyResponse is the CONTINUE answer to req.
func emptyResponse(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	r := &extprocv3.ProcessingResponse{}
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		r.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}
	case *extprocv3.ProcessingRequest_RequestBody:
		r.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}
	case *extprocv3.ProcessingRequest_RequestTrailers:
		r.Response = &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		r.Response = &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		r.Response = &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		r.Response = &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}
	}
	return r
}

// PassThrough is the least a correct server does in Envoy's FULL_DUPLEX_STREAMED body mode:
// every body chunk, request's and response's, is sent back unchanged as a streamed
// response with the chunk's end_of_stream (in that mode Envoy forwards what the server sends
// back, and a CONTINUE without it forwards an empty body); every other message gets the
// empty response of its kind. The stream ends when the client half-closes it.
type PassThrough struct {
	extprocv3.UnimplementedExternalProcessorServer
}

// Process answers every message of the stream, echoing the bodies.
func (PassThrough) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	return answerEach(srv, echoResponse)
}

// echoResponse is emptyResponse(req) with a body chunk sent back as a streamed response.
func echoResponse(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	echo := func(b *extprocv3.HttpBody) *extprocv3.BodyResponse {
		return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
				Body: b.GetBody(), EndOfStream: b.GetEndOfStream()}}}}}
	}
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: echo(v.RequestBody)}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: echo(v.ResponseBody)}}
	}
	return emptyResponse(req)
}
