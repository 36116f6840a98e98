package tournament

import (
	"context"
	"math"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/trace"
)

func TestPromptReuse(t *testing.T) {
	cases := []struct {
		name string
		rows []experiment.Row
		want float64
	}{
		{"none", nil, math.NaN()},
		{"gpu and cpu", []experiment.Row{{PromptTokens: 100, CachedTokens: 30, LoadedTokens: 20}, {PromptTokens: 100}}, 0.25},
		{"all cold", []experiment.Row{{PromptTokens: 10}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := promptReuse(c.rows)
			if got != c.want && !(math.IsNaN(got) && math.IsNaN(c.want)) {
				t.Fatalf("got %g, want %g", got, c.want)
			}
		})
	}
}

// On a window of the Mooncake conversation trace, each arm's prompt reuse
// (every request counted once, at its first admission) stays within the
// trace's reuse ceiling: the engines cannot reuse what no earlier prompt
// held. The engines' own counters (hit_rate) need not: they count every
// admission attempt (docs/decisions/1552).
func TestPromptReuseWithinTheTraceCeiling(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 300 trace requests through two arms")
	}
	tr, err := trace.Load("mooncake-conversation")
	if err != nil {
		t.Fatal(err)
	}
	fleet := experiment.DefaultConfig()
	fleet.Engines = 23
	p, err := TraceProfile(tr.Name, tr.Records, 3, trace.Options{Speedup: 1, Context: TraceContext, MaxRequests: 100}, fleet)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Profiles: []Profile{p}, Seeds: []uint64{1, 2, 3}, SampleInterval: DefaultSampleInterval,
		Arms: []experiment.Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "leastload", Policy: "leastload"}}})
	if err != nil {
		t.Fatal(err)
	}
	ceiling := p.Trace.Reuse.Fraction()
	for _, a := range res.Profiles[0].Arms {
		var sum float64
		for _, v := range a.Values(ReuseKey) {
			sum += v
		}
		// The windows run back to back: their mean reuse is within the
		// ceiling over the windows in order.
		if mean := sum / 3; !(mean > 0) || mean > ceiling {
			t.Errorf("%s: mean prompt reuse %.4f over the windows, ceiling %.4f: want 0 < reuse <= ceiling", a.Arm.Name, mean, ceiling)
		}
	}
}
