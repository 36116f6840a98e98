package extproc

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/picker"
)

// routingAnswer is a routing answer's messages in one allocation, kept between streams
// (Server.answers) with its buffers: gRPC has encoded an answer when Send returns and keeps
// nothing of it. Built from separate messages, the answer took a dozen allocations per
// request (decision 1175).
type routingAnswer struct {
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
	raw       []byte // the set headers' values, end to end
	md        metadataBuf
	unknown   []byte // the dynamic_metadata field, encoded
}

// build makes a the routing answer to d, whose endpoints are dest (joined by commas): dest
// as DestinationHeader, requestID (when not empty) as RequestIDHeader and d's rank (when it
// pins one) as RankHeader, all overwrite-or-add with raw values; ClearRouteCache; and the
// dynamic metadata (metadataBuf.appendRouting). The answer is the request headers response,
// or the request body response when inBody. It returns a's response, valid until a's next
// build.
func (a *routingAnswer) build(dest, requestID string, d *picker.Decision, omitScores, inBody bool) *extprocv3.ProcessingResponse {
	raw := append(a.raw[:0], dest...)
	keys, ends, n := [3]string{DestinationHeader}, [3]int{len(raw)}, 1
	if requestID != "" {
		raw = append(raw, requestID...)
		keys[n], ends[n] = RequestIDHeader, len(raw)
		n++
	}
	if rank, ok := d.Rank(); ok {
		raw = strconv.AppendInt(raw, int64(rank), 10)
		keys[n], ends[n] = RankHeader, len(raw)
		n++
	}
	a.raw = raw
	start := 0
	for i := range n {
		v, o := &a.values[i], &a.options[i]
		v.Key, v.RawValue = keys[i], raw[start:ends[i]:ends[i]]
		o.Header, o.AppendAction = v, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		a.set[i], start = o, ends[i]
	}
	a.mutation.SetHeaders = a.set[:n]
	a.common.ClearRouteCache, a.common.HeaderMutation = true, &a.mutation
	if inBody {
		a.body.Response, a.inBody.RequestBody, a.resp.Response = &a.common, &a.body, &a.inBody
	} else {
		a.headers.Response, a.inHeaders.RequestHeaders, a.resp.Response = &a.common, &a.headers, &a.inHeaders
	}
	a.unknown = a.md.appendRouting(a.unknown[:0], dest, d, omitScores)
	a.resp.ProtoReflect().SetUnknown(a.unknown)
	return &a.resp
}
