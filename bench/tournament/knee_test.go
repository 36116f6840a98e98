package tournament

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

func TestScaleLadder(t *testing.T) {
	cases := []struct {
		name      string
		published []float64
		capacity  float64
		want      []float64
		scale     float64
	}{
		{"within capacity runs as published", []float64{0.1, 0.2}, 0.5, []float64{0.1, 0.2}, 1},
		{"top at capacity runs as published", []float64{0.1, 0.5}, 0.5, []float64{0.1, 0.5}, 1},
		{"past capacity: top at 1.25x", []float64{3, 30, 60}, 0.4, []float64{0.025, 0.25, 0.5}, 0.4 * KneeHeadroom / 60},
		{"rounded to 3 digits", []float64{1, 3}, 1, []float64{0.417, 1.25}, KneeHeadroom / 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, scale := ScaleLadder(c.published, c.capacity)
			if !slices.Equal(got, c.want) || math.Abs(scale-c.scale) > 1e-12 {
				t.Fatalf("got %v (scale %g), want %v (scale %g)", got, scale, c.want, c.scale)
			}
		})
	}
}

// ladderResult is a ladder of len(p90s[0]) points and one arm per row of
// p90s, with TTFT p90 p90s[arm][point] and input tok/s 100*(point+1) on two
// seeds.
func ladderResult(p90s ...[]float64) Result {
	res := Result{Seeds: []uint64{1, 2}}
	for i := range p90s[0] {
		pr := ProfileResult{Profile: Profile{Name: "x"}}
		for a, row := range p90s {
			ar := ArmResult{Arm: experiment.Arm{Name: string(rune('a' + a))}}
			for _, s := range res.Seeds {
				ar.Seeds = append(ar.Seeds, SeedResult{Seed: s, Metrics: map[string]float64{capture.TTFTP90: row[i], InputTokSKey: 100 * float64(i+1)}})
			}
			pr.Arms = append(pr.Arms, ar)
		}
		res.Profiles = append(res.Profiles, pr)
	}
	return res
}

func TestKnees(t *testing.T) {
	rates := []float64{1, 2, 3, 4}
	res := ladderResult(
		[]float64{1, 1.5, 2, 5},          // leaves the floor at 4: knee 3
		[]float64{1, 1.1, 1.2, 1.3},      // never leaves it
		[]float64{1, 2.5, 3, 4},          // leaves it at once: knee 1
		[]float64{math.NaN(), 1, 1, 1},   // no floor
		[]float64{1, 1, math.NaN(), 1.2}, // a point with no value ends the knee
	)
	want := []KneePoint{
		{Floor: 1, Rate: 3, InputTokS: 300},
		{Floor: 1, Rate: 4, InputTokS: 400, Beyond: true},
		{Floor: 1, Rate: 1, InputTokS: 100},
		{Floor: math.NaN(), Rate: math.NaN(), InputTokS: math.NaN()},
		{Floor: 1, Rate: 2, InputTokS: 200},
	}
	got := Knees(res, rates)
	same := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
	for i, w := range want {
		g := got[i]
		if !same(g.Floor, w.Floor) || !same(g.Rate, w.Rate) || !same(g.InputTokS, w.InputTokS) || g.Beyond != w.Beyond {
			t.Errorf("arm %d: got %+v, want %+v", i, g, w)
		}
	}
}

func TestWriteKnee(t *testing.T) {
	res := ladderResult([]float64{1, 1.5, 2, 5}, []float64{1, 1.1, 1.2, 1.3})
	res.Profiles[0].Profile = FileProfile(workload.File{Name: "x", Config: workload.DefaultConfig()})
	cases := []struct {
		name string
		k    Knee
		want []string
	}{
		{"scaled", Knee{Name: "x", Published: []float64{10, 20, 30, 40}, Rates: []float64{1, 2, 3, 4}, Scale: 0.1, Capacity: 3.2, Offered: 40},
			[]string{"# Knee: x", "**The published ladder (10, 20, 30, 40 req/s) exceeds this fleet's capacity**", "scaled by 0.1", "| offered req/s | published | a TTFT p90 (s) | a input tok/s | b TTFT p90 (s) |",
				"| 3 | 30 | 2.000 | 300 |", "| a | 1.000 | 3.000 | 300 |", "| b | 1.000 | past 4 | 400 |", "capacity is 3.2 req/s", "offered 40 req/s"}},
		{"as published", Knee{Name: "x", Published: []float64{1, 2, 3, 4}, Rates: []float64{1, 2, 3, 4}, Scale: 1, Capacity: 9, Offered: 40},
			[]string{"is within the fleet's capacity and runs as published"}},
		{"given", Knee{Name: "x", Rates: []float64{1, 2, 3, 4}, Scale: 1, Capacity: 9, Offered: 40},
			[]string{"The ladder was given: 1, 2, 3, 4 req/s.", "| offered req/s | a TTFT p90 (s) |", "| 3 | 2.000 | 300 |"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteKnee(&b, res, c.k, ReportOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("no %q in\n%s", w, b.String())
				}
			}
		})
	}
	if err := WriteKnee(&bytes.Buffer{}, res, Knee{Rates: []float64{1}}, ReportOptions{}); err == nil {
		t.Fatal("a knee of 1 rate over 4 results was written")
	}
}

// Capacity is what an overloaded fleet completes, below what was offered;
// a fleet that keeps up is refused.
func TestCapacity(t *testing.T) {
	p := FileProfile(workload.File{Name: "x", Config: workload.DefaultConfig()})
	p.Fleet.Workload.Profile = workload.ProfileNovel
	p.Fleet.Workload.Requests = 40
	got, err := Capacity(context.Background(), p, 200, DefaultSampleInterval)
	if err != nil {
		t.Fatal(err)
	}
	if !(got > 1 && got < 100) {
		t.Fatalf("capacity %g req/s of 2,080-token prompts on 2 engines offered 200: want 1-100", got)
	}
	if _, err := Capacity(context.Background(), p, got/4, DefaultSampleInterval); err == nil || !strings.Contains(err.Error(), "kept up") {
		t.Fatalf("offered a quarter of the capacity: %v, want the fleet kept up", err)
	}
}

func TestLadderProfiles(t *testing.T) {
	p := FileProfile(workload.File{Name: "x", Config: workload.DefaultConfig()})
	got := LadderProfiles(p, []float64{0.5, 1.25})
	if len(got) != 2 || got[0].Name != "x@0.5" || got[1].Name != "x@1.25" || got[0].Fleet.Workload.Rate != 0.5 || got[1].Fleet.Workload.Rate != 1.25 || p.Fleet.Workload.Rate != workload.DefaultConfig().Rate {
		t.Fatalf("ladder profiles %+v", got)
	}
}
