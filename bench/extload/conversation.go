package extload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"google.golang.org/grpc"
)

// Request is what every request of a run sends: a POST of Body to Path, answered upstream
// by a 200 with ResponseBody.
type Request struct {
	Path         string
	Body         []byte
	ResponseBody []byte
}

// Result is one stream's outcome.
type Result struct {
	// Total is the full stream round trip: from the request's scheduled start (open loop:
	// a late start counts against the server) to the server's end of the stream.
	Total time.Duration
	// Decision is from sending the request headers to the answer that ends the request
	// phase (the server holds its headers answer until the body has arrived).
	Decision time.Duration
	// Routed says the server named a destination (x-gateway-destination-endpoint).
	Routed bool
}

// Exchange plays one request's conversation on a new stream of c, as Envoy's ext_proc
// filter does in FULL_DUPLEX_STREAMED mode: request headers, then at once the whole body
// with end_of_stream; once the server has answered the headers and ended the body, the
// upstream response's headers and, at once, its body with end_of_stream; once both are
// answered, a half-close, and the server's end of the stream. scheduled is when the request
// was due. An ImmediateResponse, a stream error or an answer out of order is an error.
func Exchange(ctx context.Context, c extprocv3.ExternalProcessorClient, req Request, scheduled time.Time) (Result, error) {
	var res Result
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.Process(ctx, grpc.ForceCodecV2(answers))
	if err != nil {
		return res, fmt.Errorf("open the stream: %w", err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(req.Body)))
	h.Set("X-Request-Id", requestID())
	sent := time.Now()
	if err := st.Send(gateway.RequestHeadersMessage(gateway.FullDuplex, http.MethodPost, req.Path, "extload", "http", h, true)); err != nil {
		return res, fmt.Errorf("send the request headers: %w", err)
	}
	if err := st.Send(gateway.RequestBodyMessage(req.Body, true)); err != nil {
		return res, fmt.Errorf("send the request body: %w", err)
	}
	var a answer
	for headers, body := false, false; !headers || !body; {
		if err := st.RecvMsg(&a); err != nil {
			return res, fmt.Errorf("during the request: %w", err)
		}
		switch a.kind {
		case respRequestHeaders:
			if headers {
				return res, errors.New("a second request headers answer")
			}
			headers = true
			res.Routed = res.Routed || a.routed
		case respRequestBody:
			// Without streamed_response the server sends no body back (Envoy then sends
			// an empty one upstream); with it, the body ends at its end_of_stream.
			body = !a.streamed || a.end
		case respImmediateResponse:
			return res, fmt.Errorf("the server answered the client itself: %d %s", a.status, truncate(a.body, 120))
		default:
			return res, fmt.Errorf("an unexpected %s answer during the request", answerKind(a.kind))
		}
	}
	res.Decision = time.Since(sent)
	rh := http.Header{}
	rh.Set("Content-Type", "text/event-stream")
	if err := st.Send(gateway.ResponseHeadersMessage(http.StatusOK, rh, true)); err != nil {
		return res, fmt.Errorf("send the response headers: %w", err)
	}
	if err := st.Send(gateway.ResponseBodyMessage(req.ResponseBody, true)); err != nil {
		return res, fmt.Errorf("send the response body: %w", err)
	}
	for headers, body := false, false; !headers || !body; {
		if err := st.RecvMsg(&a); err != nil {
			return res, fmt.Errorf("during the response: %w", err)
		}
		switch a.kind {
		case respResponseHeaders:
			headers = true
		case respResponseBody:
			body = !a.streamed || a.end
		default:
			return res, fmt.Errorf("an unexpected %s answer during the response", answerKind(a.kind))
		}
	}
	if err := st.CloseSend(); err != nil {
		return res, fmt.Errorf("half-close the stream: %w", err)
	}
	switch err := st.RecvMsg(&a); {
	case err == nil:
		return res, errors.New("an answer after the response ended")
	case !errors.Is(err, io.EOF):
		return res, fmt.Errorf("waiting for the server to end the stream: %w", err)
	}
	res.Total = time.Since(scheduled)
	return res, nil
}

// answers reads the server's answers (see answerCodec).
var answers = newAnswerCodec()

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// EnvoyHTTP2Window is Envoy's default HTTP/2 stream and connection flow-control window,
// 256 MiB (Http2ProtocolOptions.initial_stream_window_size and
// initial_connection_window_size), which the shipped Envoy configurations keep for the
// ext_proc cluster (envoy/gateway.yaml: http2_protocol_options: {}).
const EnvoyHTTP2Window = 256 << 20

// DialOptions are the gRPC client options that make a connection receive as Envoy's
// does: its static windows, so the server's answers (the bodies it sends back included)
// never wait for a window update, where gRPC's own client starts at 64 KiB and grows its
// windows only as its bandwidth estimate does.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(EnvoyHTTP2Window), grpc.WithInitialConnWindowSize(EnvoyHTTP2Window)}
}
