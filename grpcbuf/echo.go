package grpcbuf

import (
	"slices"
	"sync"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file encodes the ext_proc answer that sends a body chunk back in Envoy's
// full-duplex mode (a StreamedBodyResponse) without proto's Size and Marshal passes and
// without copying the chunk (decision 1194). The message is five nested messages around
// the chunk's bytes: a few bytes of tags and lengths go before them and at most two after
// (end_of_stream). The chunk's bytes are sent from where they are: gRPC forbids changing a
// message after Send (grpc.ServerStream.SendMsg), and these are the message's.

// Field numbers of the answer's path, read from the descriptors once.
var (
	echoRequestBody  = fieldNumber(&extprocv3.ProcessingResponse{}, "request_body")
	echoResponseBody = fieldNumber(&extprocv3.ProcessingResponse{}, "response_body")
	echoCommon       = fieldNumber(&extprocv3.BodyResponse{}, "response")
	echoMutation     = fieldNumber(&extprocv3.CommonResponse{}, "body_mutation")
	echoStreamed     = fieldNumber(&extprocv3.BodyMutation{}, "streamed_response")
	echoBody         = fieldNumber(&extprocv3.StreamedBodyResponse{}, "body")
	echoEOS          = fieldNumber(&extprocv3.StreamedBodyResponse{}, "end_of_stream")
)

func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// eosTrailer is end_of_stream: true, shared read-only by every answer that ends a body.
var eosTrailer = protowire.AppendVarint(protowire.AppendTag(nil, echoEOS, protowire.VarintType), 1)

// marshalEcho encodes r as proto.Marshal would when r is a request or response body
// answer that sets nothing but a StreamedBodyResponse's body and end_of_stream; for any
// other message (another answer, a field or unknown bytes more at any level) it returns
// false and the caller marshals r as usual. heads gives the bytes before the chunk.
func marshalEcho(r *extprocv3.ProcessingResponse, heads *headSlab) (mem.BufferSlice, bool) {
	var top protowire.Number
	var br *extprocv3.BodyResponse
	switch v := r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestBody:
		top, br = echoRequestBody, v.RequestBody
	case *extprocv3.ProcessingResponse_ResponseBody:
		top, br = echoResponseBody, v.ResponseBody
	default:
		return nil, false
	}
	cr := br.GetResponse()
	bm := cr.GetBodyMutation()
	sr := bm.GetStreamedResponse()
	if sr == nil || !answerOnly.holds(r) || !bodyOnly.holds(br) || !commonOnly.holds(cr) || !mutationOnly.holds(bm) || !chunkOnly.holds(sr) {
		return nil, false
	}
	body, eos := sr.GetBody(), sr.GetEndOfStream()
	// Lengths from the inside out; every tag here is one byte (field numbers below 16).
	inner := 0
	if len(body) > 0 {
		inner = 1 + protowire.SizeBytes(len(body))
	}
	if eos {
		inner += len(eosTrailer)
	}
	mutation := 1 + protowire.SizeBytes(inner)
	common := 1 + protowire.SizeBytes(mutation)
	answer := 1 + protowire.SizeBytes(common)
	n := 4 + protowire.SizeVarint(uint64(answer)) + protowire.SizeVarint(uint64(common)) +
		protowire.SizeVarint(uint64(mutation)) + protowire.SizeVarint(uint64(inner))
	if len(body) > 0 {
		n += 1 + protowire.SizeVarint(uint64(len(body)))
	}
	h := heads.take(n)
	h = protowire.AppendTag(h, top, protowire.BytesType)
	h = protowire.AppendVarint(h, uint64(answer))
	h = protowire.AppendTag(h, echoCommon, protowire.BytesType)
	h = protowire.AppendVarint(h, uint64(common))
	h = protowire.AppendTag(h, echoMutation, protowire.BytesType)
	h = protowire.AppendVarint(h, uint64(mutation))
	h = protowire.AppendTag(h, echoStreamed, protowire.BytesType)
	h = protowire.AppendVarint(h, uint64(inner))
	data := make(mem.BufferSlice, 1, 3)
	if len(body) > 0 {
		h = protowire.AppendTag(h, echoBody, protowire.BytesType)
		h = protowire.AppendVarint(h, uint64(len(body)))
		data = append(data, mem.SliceBuffer(body))
	}
	data[0] = mem.SliceBuffer(h)
	if eos {
		data = append(data, mem.SliceBuffer(eosTrailer))
	}
	return data, true
}

// pathOnly is, for one message type, every field but those on an echo's path: an echo
// sets none of them. It is read from the descriptor, so a field a newer ext_proc adds
// counts too.
type pathOnly []protoreflect.FieldDescriptor

func newPathOnly(m proto.Message, path ...protoreflect.Name) pathOnly {
	var others pathOnly
	fields := m.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); !slices.Contains(path, fd.Name()) {
			others = append(others, fd)
		}
	}
	return others
}

// holds reports whether m sets none of the fields and carries no unknown bytes.
func (others pathOnly) holds(m proto.Message) bool {
	pm := m.ProtoReflect()
	for _, fd := range others {
		if pm.Has(fd) {
			return false
		}
	}
	return len(pm.GetUnknown()) == 0
}

// The fields each message of an echo's path leaves unset.
var (
	answerOnly   = newPathOnly(&extprocv3.ProcessingResponse{}, "request_body", "response_body")
	bodyOnly     = newPathOnly(&extprocv3.BodyResponse{}, "response")
	commonOnly   = newPathOnly(&extprocv3.CommonResponse{}, "body_mutation")
	mutationOnly = newPathOnly(&extprocv3.BodyMutation{}, "streamed_response")
	chunkOnly    = newPathOnly(&extprocv3.StreamedBodyResponse{}, "body", "end_of_stream")
)

// headSlab hands out the small buffers the answers' leading bytes are written to, carved
// from 4 KiB blocks so that an answer costs no allocation of its own: a block is
// collected once no answer still being sent refers to it. Safe for concurrent use.
type headSlab struct {
	mu    sync.Mutex
	block []byte
}

const headBlock = 4 << 10

// take returns an empty slice with capacity n, which nothing else is ever handed.
func (s *headSlab) take(n int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cap(s.block)-len(s.block) < n {
		s.block = make([]byte, 0, max(headBlock, n))
	}
	at := len(s.block)
	s.block = s.block[:at+n]
	return s.block[at : at : at+n]
}
