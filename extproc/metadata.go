package extproc

import (
	"math"

	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/protobuf/encoding/protowire"
)

// Names of the decision metadata the server adds beside the destination (see
// docs/decisions/0902-scores-in-dynamic-metadata.md).
const (
	// ScoresKey is GIE's proposed envoy.lb key (gateway-api-inference-extension#2985): a
	// struct mapping each scored candidate "ip:port" to its score, higher preferred. It
	// informs; x-gateway-destination-endpoint alone decides where the request goes.
	ScoresKey = "x-gateway-destination-endpoint-scores"
	// DecisionNamespace is the picker's own dynamic-metadata namespace: "policy" and
	// "reason" (strings) and "ranked" (the scored candidates, best first).
	DecisionNamespace = "loadaware.decision"
	// MaxScored bounds the candidates listed, best first, so the metadata of a large fleet
	// stays small.
	MaxScored = 8
)

// Field numbers of google.protobuf.Struct, Value and ListValue, and of
// ProcessingResponse.dynamic_metadata.
const (
	structFields        = 1 // Struct.fields: map<string, Value>, entries of key = 1, value = 2
	valueNumber         = 2 // Value.number_value: double
	valueString         = 3 // Value.string_value
	valueStruct         = 5 // Value.struct_value
	valueList           = 6 // Value.list_value
	listValues          = 1 // ListValue.values
	respDynamicMetadata = 8 // ProcessingResponse.dynamic_metadata
)

// metadataBuf holds the buffers appendRouting encodes in, kept between routing answers
// (Server.answers) so that an answer's metadata allocates nothing once they have grown.
type metadataBuf struct {
	v, scores, ranked, lb, dec, md []byte
}

// appendRouting appends the field ProcessingResponse.dynamic_metadata of a routing
// answer, encoded, to dst: the destination value in envoy.lb and, unless omitScores, the
// candidates' scores there and the decision's policy, reason and ranking in
// DecisionNamespace. The caller sets it as the response's unknown fields, which protobuf
// writes as they are and every reader decodes as dynamic_metadata. It is the
// google.protobuf.Struct that structpb would build, encoded without reflection: marshalling
// that Struct's maps through protobuf-go was a tenth of the server's CPU per request
// (decision 1110); TestRoutingMetadataMatchesStructpb holds the two to the same message.
// What it returns is valid until b's next use.
func (b *metadataBuf) appendRouting(dst []byte, dest string, d *picker.Decision, omitScores bool) []byte {
	n := min(len(d.Ranked), MaxScored)
	if omitScores {
		n = 0
	}
	v, scores, ranked, lb, dec := b.v[:0], b.scores[:0], b.ranked[:0], b.lb[:0], b.dec[:0]
	v = appendString(v, valueString, dest)
	lb = appendEntry(lb, DestinationHeader, v)
	if n > 0 {
		for _, r := range d.Ranked[:n] {
			if math.IsNaN(r.Score) || math.IsInf(r.Score, 0) {
				continue // JSON (and so Envoy's access log) cannot carry it
			}
			v = protowire.AppendTag(v[:0], valueNumber, protowire.Fixed64Type)
			v = protowire.AppendFixed64(v, math.Float64bits(r.Score))
			scores = appendEntry(scores, r.Addr, v)
			v = appendString(v[:0], valueString, r.Addr)
			ranked = appendBytes(ranked, listValues, v)
		}
		v = appendBytes(v[:0], valueStruct, scores)
		lb = appendEntry(lb, ScoresKey, v)
		v = appendString(v[:0], valueString, d.Policy)
		dec = appendEntry(dec, "policy", v)
		v = appendString(v[:0], valueString, d.Ranked[0].Reason)
		dec = appendEntry(dec, "reason", v)
		v = appendBytes(v[:0], valueList, ranked)
		dec = appendEntry(dec, "ranked", v)
	}
	v = appendBytes(v[:0], valueStruct, lb)
	md := appendEntry(b.md[:0], LBNamespace, v)
	if n > 0 {
		v = appendBytes(v[:0], valueStruct, dec)
		md = appendEntry(md, DecisionNamespace, v)
	}
	b.v, b.scores, b.ranked, b.lb, b.dec, b.md = v, scores, ranked, lb, dec, md
	return appendBytes(dst, respDynamicMetadata, md)
}

// appendEntry appends one Struct.fields entry: key and the encoded Value value.
func appendEntry(b []byte, key string, value []byte) []byte {
	b = protowire.AppendTag(b, structFields, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeBytes(len(key))+protowire.SizeTag(2)+protowire.SizeBytes(len(value))))
	b = appendString(b, 1, key)
	return appendBytes(b, 2, value)
}

// appendString appends field num as a length-delimited field holding s.
func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendBytes appends field num as a length-delimited field holding v.
func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}
