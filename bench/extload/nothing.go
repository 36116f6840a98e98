// Package extload is an open-loop load generator for ext_proc servers: it plays Envoy's
// full-duplex conversation for every request on its own stream (request headers, the body
// with end_of_stream, then the upstream response's headers and body, as Envoy sends them
// without waiting for answers), at a Poisson arrival rate, and records each stream's round
// trip. Beside it is Nothing, the do-nothing ext_proc server whose figures are the floor
// a real server is compared with, and the child-process protocol that lets each server run
// alone in its own process so its CPU time can be read honestly.
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
	for {
		req, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := srv.Send(emptyResponse(req)); err != nil {
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
