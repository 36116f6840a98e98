package gateway

import "google.golang.org/protobuf/types/known/structpb"

// Dynamic-metadata keys the gateway reads beside the destination, as the shipped Envoy
// configurations receive and log them (receiving_namespaces envoy.lb and loadaware.decision).
const (
	// ScoresKey is GIE's proposed envoy.lb key: candidate "ip:port" -> score, higher preferred.
	ScoresKey = "x-gateway-destination-endpoint-scores"
	// DecisionNamespace holds the picker's policy, reason and ranking.
	DecisionNamespace = "loadaware.decision"
)

// Decision is what the picker's dynamic metadata said about one routing decision.
type Decision struct {
	Scores map[string]float64 // candidate -> score; nil when the picker sent none
	Ranked []string           // candidates, best first
	Policy string
	Reason string
}

// decisionMetadata reads the scores and the decision from md; ok is false when md carries
// neither.
func decisionMetadata(md *structpb.Struct) (Decision, bool) {
	var d Decision
	sv, hasScores := md.GetFields()["envoy.lb"].GetStructValue().GetFields()[ScoresKey]
	if hasScores {
		d.Scores = map[string]float64{}
		for ep, v := range sv.GetStructValue().GetFields() {
			d.Scores[ep] = v.GetNumberValue()
		}
	}
	dv, hasDecision := md.GetFields()[DecisionNamespace]
	if hasDecision {
		f := dv.GetStructValue().GetFields()
		d.Policy, d.Reason = f["policy"].GetStringValue(), f["reason"].GetStringValue()
		for _, v := range f["ranked"].GetListValue().GetValues() {
			d.Ranked = append(d.Ranked, v.GetStringValue())
		}
	}
	return d, hasScores || hasDecision
}
