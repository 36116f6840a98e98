package extproc

import (
	"fmt"
	"math"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/scoring"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
)

// mustStruct builds a Struct from a JSON-like map, failing the test on a bad literal.
func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ranked(reason string, addrScore ...any) []scoring.Ranked {
	var out []scoring.Ranked
	for i := 0; i < len(addrScore); i += 2 {
		out = append(out, scoring.Ranked{Addr: addrScore[i].(string), Score: addrScore[i+1].(float64), Reason: reason})
	}
	return out
}

func TestRoutingMetadata(t *testing.T) {
	many := make([]scoring.Ranked, MaxScored+5)
	for i := range many {
		many[i] = scoring.Ranked{Addr: fmt.Sprintf("10.0.1.%d:8000", i), Score: float64(len(many) - i), Reason: scoring.ReasonLoadBalance}
	}
	manyScores, manyRanked := map[string]any{}, []any{}
	for _, r := range many[:MaxScored] {
		manyScores[r.Addr] = r.Score
		manyRanked = append(manyRanked, r.Addr)
	}
	tests := []struct {
		name       string
		dest       string
		d          picker.Decision
		omitScores bool
		want       map[string]any
	}{
		{
			name: "scores of every candidate and the decision, ranked best first",
			dest: "10.0.0.2:8000",
			d:    picker.Decision{Policy: "loadaware", Ranked: ranked(scoring.ReasonCacheAffinity, "10.0.0.2:8000", 0.91, "10.0.0.1:8000", 0.74, "10.0.0.3:8000", -0.5)},
			want: map[string]any{
				LBNamespace: map[string]any{DestinationHeader: "10.0.0.2:8000",
					ScoresKey: map[string]any{"10.0.0.2:8000": 0.91, "10.0.0.1:8000": 0.74, "10.0.0.3:8000": -0.5}},
				DecisionNamespace: map[string]any{"policy": "loadaware", "reason": "cache-affinity",
					"ranked": []any{"10.0.0.2:8000", "10.0.0.1:8000", "10.0.0.3:8000"}},
			},
		},
		{
			name:       "omitted: the destination alone, as before",
			dest:       "10.0.0.2:8000",
			d:          picker.Decision{Policy: "loadaware", Ranked: ranked(scoring.ReasonCacheAffinity, "10.0.0.2:8000", 0.91)},
			omitScores: true,
			want:       map[string]any{LBNamespace: map[string]any{DestinationHeader: "10.0.0.2:8000"}},
		},
		{
			name: "a large fleet lists its best MaxScored",
			dest: many[0].Addr,
			d:    picker.Decision{Policy: "loadaware", Ranked: many},
			want: map[string]any{
				LBNamespace:       map[string]any{DestinationHeader: many[0].Addr, ScoresKey: manyScores},
				DecisionNamespace: map[string]any{"policy": "loadaware", "reason": "load-balance", "ranked": manyRanked},
			},
		},
		{
			name: "a score JSON cannot carry is left out",
			dest: "10.0.0.1:8000",
			d:    picker.Decision{Policy: "leastload", Ranked: ranked(scoring.ReasonLeastLoad, "10.0.0.1:8000", 0.0, "10.0.0.2:8000", math.Inf(-1), "10.0.0.3:8000", math.NaN())},
			want: map[string]any{
				LBNamespace:       map[string]any{DestinationHeader: "10.0.0.1:8000", ScoresKey: map[string]any{"10.0.0.1:8000": 0.0}},
				DecisionNamespace: map[string]any{"policy": "leastload", "reason": "least-load", "ranked": []any{"10.0.0.1:8000"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, got := range map[string]*structpb.Struct{
				"encoded":  decodeMetadata(t, new(metadataBuf).appendRouting(nil, tt.dest, &tt.d, tt.omitScores)),
				"structpb": referenceRoutingMetadata(tt.dest, tt.d, tt.omitScores),
			} {
				if diff := cmp.Diff(mustStruct(t, tt.want), got, protocmp.Transform()); diff != "" {
					t.Errorf("%s metadata differs (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}

// decodeMetadata reads the dynamic_metadata of a ProcessingResponse encoded as raw.
func decodeMetadata(t testing.TB, raw []byte) *structpb.Struct {
	t.Helper()
	var r extprocv3.ProcessingResponse
	if err := proto.Unmarshal(raw, &r); err != nil {
		t.Fatalf("the encoded metadata does not decode: %v", err)
	}
	return r.GetDynamicMetadata()
}

// referenceRoutingMetadata builds with structpb the Struct appendRouting encodes.
func referenceRoutingMetadata(dest string, d picker.Decision, omitScores bool) *structpb.Struct {
	lb := map[string]*structpb.Value{DestinationHeader: structpb.NewStringValue(dest)}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: lb})}}
	if omitScores || len(d.Ranked) == 0 {
		return md
	}
	scores := map[string]*structpb.Value{}
	var ranked []*structpb.Value
	for _, r := range d.Ranked[:min(len(d.Ranked), MaxScored)] {
		if math.IsNaN(r.Score) || math.IsInf(r.Score, 0) {
			continue
		}
		scores[r.Addr] = structpb.NewNumberValue(r.Score)
		ranked = append(ranked, structpb.NewStringValue(r.Addr))
	}
	lb[ScoresKey] = structpb.NewStructValue(&structpb.Struct{Fields: scores})
	md.Fields[DecisionNamespace] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"policy": structpb.NewStringValue(d.Policy),
		"reason": structpb.NewStringValue(d.Ranked[0].Reason),
		"ranked": structpb.NewListValue(&structpb.ListValue{Values: ranked}),
	}})
	return md
}

// TestRoutingMetadataMatchesStructpb holds the direct encoding to the Struct structpb
// builds, over decisions of every size up to past MaxScored, with empty and long names,
// negative zero and every policy's reasons.
func TestRoutingMetadataMatchesStructpb(t *testing.T) {
	reasons := []string{scoring.ReasonCacheAffinity, scoring.ReasonLoadBalance, scoring.ReasonLeastLoad, ""}
	reused := new(metadataBuf) // one buffer through every case, as a routing answer's is across streams
	for n := range MaxScored + 3 {
		for _, omit := range []bool{false, true} {
			d := picker.Decision{Policy: strings.Repeat("p", n*40)}
			for i := range n {
				d.Ranked = append(d.Ranked, scoring.Ranked{Addr: fmt.Sprintf("10.0.%d.%d:%d", i, n, 8000+i), Score: []float64{0.5, -1, math.Copysign(0, -1), 1e300, 0}[i%5], Reason: reasons[(i+n)%len(reasons)]})
			}
			dest := ""
			if n > 0 {
				dest = d.Ranked[0].Addr + "," + strings.Repeat("x", 200)
			}
			want := referenceRoutingMetadata(dest, d, omit)
			for name, b := range map[string]*metadataBuf{"new buffer": new(metadataBuf), "reused buffer": reused} {
				got := decodeMetadata(t, b.appendRouting(nil, dest, &d, omit))
				if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
					t.Fatalf("%d candidates, omit %v, %s: encoded metadata differs (-structpb +encoded):\n%s", n, omit, name, diff)
				}
			}
		}
	}
}

// TestScoresOnTheStream checks the routing answer on the real gRPC stream: the scores
// name every candidate, the ranking starts at the destination, and the header and the
// envoy.lb destination agree.
func TestScoresOnTheStream(t *testing.T) {
	eps := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}
	h := newHarness(t, harnessOpts{endpoints: eps, scores: true})
	for i := range 2 * len(eps) { // every endpoint wins once while the others are busier
		st, _ := h.open(t)
		for _, r := range []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(`{"model":"m","prompt":"hi"}`, true)} {
			if err := st.Send(r); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		header := ""
		for _, o := range resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
			if o.GetHeader().GetKey() == DestinationHeader {
				header = string(o.GetHeader().GetRawValue())
			}
		}
		md := resp.GetDynamicMetadata().GetFields()
		lb := md[LBNamespace].GetStructValue().GetFields()
		if got := lb[DestinationHeader].GetStringValue(); got == "" || got != header {
			t.Fatalf("request %d: envoy.lb destination %q, header %q", i, got, header)
		}
		scores := lb[ScoresKey].GetStructValue().GetFields()
		dec := md[DecisionNamespace].GetStructValue().GetFields()
		var order []string
		for _, v := range dec["ranked"].GetListValue().GetValues() {
			order = append(order, v.GetStringValue())
		}
		if len(scores) != len(eps) || len(order) != len(eps) || order[0] != header {
			t.Fatalf("request %d: scores %v, ranked %v, want all of %v with %s first", i, scores, order, eps, header)
		}
		for j := 1; j < len(order); j++ {
			if scores[order[j]].GetNumberValue() > scores[order[j-1]].GetNumberValue() {
				t.Errorf("request %d: ranked %v is not best first by scores %v", i, order, scores)
			}
		}
		if p, r := dec["policy"].GetStringValue(), dec["reason"].GetStringValue(); p != "leastload" || r != scoring.ReasonLeastLoad {
			t.Errorf("request %d: policy %q reason %q, want leastload and %s", i, p, r, scoring.ReasonLeastLoad)
		}
		if _, err := st.Recv(); err != nil { // the streamed body
			t.Fatal(err)
		}
		// Keep the booking: the next request sees this endpoint busier.
	}
	if got := h.inflight(); got != 2*len(eps) {
		t.Fatalf("in flight %d, want %d", got, 2*len(eps))
	}
}

// BenchmarkRoutingMetadata measures building and encoding the routing answer's dynamic
// metadata for n candidates, with and without the scores: directly (what the server does)
// and through structpb and proto.Marshal (what it did).
func BenchmarkRoutingMetadata(b *testing.B) {
	for _, n := range []int{3, 8, 32} {
		d := picker.Decision{Policy: "loadaware"}
		for i := range n {
			d.Ranked = append(d.Ranked, scoring.Ranked{Addr: fmt.Sprintf("10.0.0.%d:8000", i+1), Score: 1 - float64(i)/10, Reason: scoring.ReasonCacheAffinity})
		}
		for _, omit := range []bool{true, false} {
			name := fmt.Sprintf("candidates=%d/scores=%v", n, !omit)
			b.Run(name+"/encoded", func(b *testing.B) {
				b.ReportAllocs()
				size := 0
				for b.Loop() {
					size = len(new(metadataBuf).appendRouting(nil, d.Ranked[0].Addr, &d, omit))
				}
				b.ReportMetric(float64(size), "bytes")
			})
			b.Run(name+"/structpb", func(b *testing.B) {
				b.ReportAllocs()
				size := 0
				for b.Loop() {
					raw, err := proto.Marshal(referenceRoutingMetadata(d.Ranked[0].Addr, d, omit))
					if err != nil {
						b.Fatal(err)
					}
					size = len(raw)
				}
				b.ReportMetric(float64(size), "bytes")
			})
		}
	}
}

// BenchmarkRoundTripScores is BenchmarkRoundTrip with and without the scores.
func BenchmarkRoundTripScores(b *testing.B) {
	msgs, request, answers := fullDuplex8KiB()
	for _, scores := range []bool{false, true} {
		b.Run(fmt.Sprintf("scores=%v", scores), func(b *testing.B) {
			benchRoundTrip(b, harnessOpts{endpoints: benchEndpoints, scores: scores}, msgs, request, answers)
		})
	}
}
