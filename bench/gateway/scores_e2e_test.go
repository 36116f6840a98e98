package gateway_test

import (
	"maps"
	"sync"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/gateway"
)

// TestEndToEndEveryRoutedRequestCarriesScores checks that the real picker's scores and
// reason reach the gateway's view of every routed request, in both body modes.
func TestEndToEndEveryRoutedRequestCarriesScores(t *testing.T) {
	for _, mode := range []gateway.BodyMode{gateway.FullDuplex, gateway.Buffered} {
		t.Run(string(mode), func(t *testing.T) {
			var mu sync.Mutex
			var outs []gateway.Outcome
			s := newStack(t, "loadaware", mode, 3, instant, func(o *gateway.Options) {
				o.OnOutcome = func(out gateway.Outcome) {
					mu.Lock()
					outs = append(outs, out)
					mu.Unlock()
				}
			})
			const n = 6
			for i := range n {
				if code, _, _ := s.send(t, i); code != 200 {
					t.Fatalf("request %d: status %d", i, code)
				}
			}
			s.gw.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(outs) != n {
				t.Fatalf("%d outcomes, want %d", len(outs), n)
			}
			reasons := map[string]float64{}
			for i, o := range outs {
				d := o.Decision
				if len(d.Scores) != len(s.engines) || len(d.Ranked) != len(s.engines) {
					t.Errorf("request %d: scores %v, ranked %v: want all %d engines", i, d.Scores, d.Ranked, len(s.engines))
					continue
				}
				if d.Ranked[0] != o.Endpoint {
					t.Errorf("request %d: ranked first %s, but %s served it", i, d.Ranked[0], o.Endpoint)
				}
				for _, ep := range d.Ranked {
					if _, ok := s.byAddr[ep]; !ok {
						t.Errorf("request %d: ranked %s is not an engine", i, ep)
					}
					if d.Scores[ep] > d.Scores[d.Ranked[0]] {
						t.Errorf("request %d: %s scores %v, above the winner's %v", i, ep, d.Scores[ep], d.Scores[d.Ranked[0]])
					}
				}
				if d.Policy != "loadaware" {
					t.Errorf("request %d: policy %q, want loadaware", i, d.Policy)
				}
				reasons[d.Reason]++
			}
			// The reasons are those the picker counted in its decision metric.
			if want := decisionsByReason(t, s); !maps.Equal(reasons, want) {
				t.Errorf("reasons in the metadata %v, loadaware_decisions_total by reason %v", reasons, want)
			}
		})
	}
}

// decisionsByReason reads loadaware_decisions_total from the picker's registry.
func decisionsByReason(t *testing.T, s *stack) map[string]float64 {
	t.Helper()
	mfs, err := s.app.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "loadaware_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
