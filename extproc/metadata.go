package extproc

import (
	"math"

	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/protobuf/types/known/structpb"
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

// routingMetadata is the dynamic metadata of a routing answer: the destination value in
// envoy.lb and, unless omitScores, the candidates' scores there and the decision's policy,
// reason and ranking in DecisionNamespace.
func routingMetadata(dest string, d picker.Decision, omitScores bool) *structpb.Struct {
	lb := map[string]*structpb.Value{DestinationHeader: structpb.NewStringValue(dest)}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: lb})}}
	if omitScores || len(d.Ranked) == 0 {
		return md
	}
	n := min(len(d.Ranked), MaxScored)
	// One allocation per kind of value rather than three per candidate: this runs on
	// every decision.
	vals := make([]structpb.Value, 2*n)
	nums := make([]structpb.Value_NumberValue, n)
	strs := make([]structpb.Value_StringValue, n)
	scores := make(map[string]*structpb.Value, n)
	ranked := make([]*structpb.Value, 0, n)
	for i, r := range d.Ranked[:n] {
		if math.IsNaN(r.Score) || math.IsInf(r.Score, 0) {
			continue // JSON (and so Envoy's access log) cannot carry it
		}
		nums[i].NumberValue, strs[i].StringValue = r.Score, r.Addr
		vals[2*i].Kind, vals[2*i+1].Kind = &nums[i], &strs[i]
		scores[r.Addr] = &vals[2*i]
		ranked = append(ranked, &vals[2*i+1])
	}
	lb[ScoresKey] = structpb.NewStructValue(&structpb.Struct{Fields: scores})
	md.Fields[DecisionNamespace] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"policy": structpb.NewStringValue(d.Policy),
		"reason": structpb.NewStringValue(d.Ranked[0].Reason),
		"ranked": structpb.NewListValue(&structpb.ListValue{Values: ranked}),
	}})
	return md
}
