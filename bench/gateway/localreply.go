package gateway

import (
	"io"
	"net/http"
	"strconv"
	"strings"
)

// What Envoy does when the endpoint the picker chose cannot be reached, and so what the
// gateway does (decision 1535):
//
//   - The router retries an attempt that failed before the response headers when the route's
//     retry_on names the failure: connect-failure (refused or timed out), reset (the
//     connection was reset or closed before the headers: a stale pooled connection, an
//     engine killed mid-request) and refused-stream. envoy/fallback.yaml ships retry_on
//     connect-failure,refused-stream,reset, and its override_host load balancing policy
//     sends the retry to the next address of the picker's list (Envoy docs: router filter,
//     x-envoy-retry-on; Override Host Load Balancing Policy, which names GIE's endpoint
//     picker protocol as its use). Only the final response reaches the HTTP filters.
//   - When no attempt is left, the router answers a local reply: 503, text/plain,
//     "upstream connect error or disconnect/reset before headers. reset reason: ...".
//   - A local reply is encoded through the filter chain, so the ext_proc filter's
//     encodeHeaders sends it to the external processor as response_headers (:status 503)
//     like any response (envoyproxy/envoy source/extensions/filters/http/ext_proc/ext_proc.cc,
//     Filter::encodeHeaders: "in case the decodeHeaders() is not called when processing
//     local reply"; envoyproxy/envoy#29440 shows the trace; #41769 "re-enable sending local
//     replies to the ext_proc server"). The picker thus sees the 503 of a refused connect
//     in its response phase, which is what decision 1132's passive ejection counts.
//
// The gateway had answered the client itself and reset the stream, so a picker behind it
// never saw a refused connect; and it moved on only after a refused connect, so a pooled
// connection the killed engine had closed failed the request where Envoy retries it.

// localReplyPrefix begins the body of Envoy's local reply when no attempt got headers.
const localReplyPrefix = "upstream connect error or disconnect/reset before headers. reset reason: "

// localReply is the response Envoy's router makes when every attempt failed with err, the
// last attempt's error: a 503 whose body names the reset reason as Envoy does ("remote
// connection failure" for a connect failure, "connection termination" otherwise).
func localReply(err error) *http.Response {
	reason := "connection termination"
	if isConnectError(err) {
		reason = "remote connection failure"
	}
	body := localReplyPrefix + reason
	return &http.Response{
		StatusCode:    http.StatusServiceUnavailable,
		Header:        http.Header{"Content-Type": {"text/plain"}, "Content-Length": {strconv.Itoa(len(body))}},
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(strings.NewReader(body)),
	}
}
