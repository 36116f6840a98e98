package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestDecisionMetadata(t *testing.T) {
	tests := []struct {
		name   string
		md     map[string]any
		want   Decision
		wantOK bool
	}{
		{"destination only", map[string]any{"envoy.lb": map[string]any{DestinationHeader: "10.0.0.1:8000"}}, Decision{}, false},
		{"nothing", nil, Decision{}, false},
		{"scores and decision", map[string]any{
			"envoy.lb":        map[string]any{DestinationHeader: "10.0.0.2:8000", ScoresKey: map[string]any{"10.0.0.2:8000": 0.9, "10.0.0.1:8000": -0.25}},
			DecisionNamespace: map[string]any{"policy": "loadaware", "reason": "load-balance", "ranked": []any{"10.0.0.2:8000", "10.0.0.1:8000"}},
		}, Decision{Scores: map[string]float64{"10.0.0.2:8000": 0.9, "10.0.0.1:8000": -0.25},
			Ranked: []string{"10.0.0.2:8000", "10.0.0.1:8000"}, Policy: "loadaware", Reason: "load-balance"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md, err := structpb.NewStruct(tt.md)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := decisionMetadata(md)
			if ok != tt.wantOK {
				t.Errorf("ok = %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decision differs (-want +got):\n%s", diff)
			}
		})
	}
}
