package stats

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestComparePaired(t *testing.T) {
	base := []float64{2.4, 2.2, 2.6, 2.3, 2.5, 2.1, 2.7, 2.4}
	cand := []float64{1.2, 1.1, 1.3, 2.4, 1.2, 1.0, 1.4, 1.3}
	c, err := ComparePaired(base, cand, Bootstrap{Level: 0.95, Resamples: 2000, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c.Seeds != 8 || c.Improved != 7 {
		t.Errorf("seeds=%d improved=%d, want 8 and 7", c.Seeds, c.Improved)
	}
	// Seven of eight reductions are positive and the one negative has rank 1:
	// W+ = 35 of 36, p = P(W+ >= 35) = 2/256; the other way round W+ = 1 and
	// P(W+ >= 1) = 255/256.
	if c.Test.WPlus != 35 || !near(c.Test.P, 2.0/256, 1e-12) {
		t.Errorf("test = %+v, want W+=35 p=%v", c.Test, 2.0/256)
	}
	if c.Worse.WPlus != 1 || !near(c.Worse.P, 255.0/256, 1e-12) {
		t.Errorf("worse = %+v, want W+=1 p=%v", c.Worse, 255.0/256)
	}
	red, err := RelativeReductions(base, cand)
	if err != nil {
		t.Fatal(err)
	}
	if want := Median(red); c.Reduction != want {
		t.Errorf("reduction = %v, want %v", c.Reduction, want)
	}
	if !(c.CI.Lo <= c.Reduction && c.Reduction <= c.CI.Hi) || c.CI.Level != 0.95 {
		t.Errorf("CI %+v misses the reduction %v", c.CI, c.Reduction)
	}
	if !c.Significant(0.025) || c.Significant(0.001) || c.SignificantlyWorse(0.5) {
		t.Errorf("Significant is wrong for p=%v, %v", c.Test.P, c.Worse.P)
	}
	if _, err := ComparePaired(nil, nil, DefaultBootstrap); err == nil {
		t.Error("no seeds: want an error")
	}
	if _, err := ComparePaired([]float64{1}, []float64{math.NaN()}, DefaultBootstrap); err == nil {
		t.Error("NaN candidate: want an error")
	}
}

// TestComparePairedWithoutBootstrap: no resamples, no interval; the tests and
// the reduction are those with one.
func TestComparePairedWithoutBootstrap(t *testing.T) {
	base := []float64{3, 4, 5, 6, 7}
	cand := []float64{2, 4.5, 4, 5, 6.5}
	with, err := ComparePaired(base, cand, DefaultBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	without, err := ComparePaired(base, cand, Bootstrap{})
	if err != nil {
		t.Fatal(err)
	}
	if without.CI != (Interval{}) {
		t.Errorf("CI without resamples = %+v, want none", without.CI)
	}
	with.CI = Interval{}
	if diff := cmp.Diff(with, without); diff != "" {
		t.Errorf("(-with +without):\n%s", diff)
	}
}

// TestOneSidedTestsAreMirrorImages: the p-value of "candidate smaller" tested
// on baseline-candidate equals the one tested on candidate-baseline with the
// opposite alternative, bit for bit (the null distribution's probabilities are
// dyadic, so its tails sum exactly in either order), with and without ties.
func TestOneSidedTestsAreMirrorImages(t *testing.T) {
	tests := []struct {
		name       string
		base, cand []float64
	}{
		{"no ties", []float64{5, 6, 7, 8, 9, 10, 11}, []float64{4.5, 6.2, 6, 7.1, 9.4, 8, 12}},
		{"ties and zeros", []float64{1, 2, 3, 4, 5, 6}, []float64{0.5, 2.5, 3, 3.5, 5.5, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, alt := range []Alternative{Greater, Less} {
				mirror := Less
				if alt == Less {
					mirror = Greater
				}
				a, err := WilcoxonPaired(tt.base, tt.cand, alt)
				if err != nil {
					t.Fatal(err)
				}
				b, err := WilcoxonPaired(tt.cand, tt.base, mirror)
				if err != nil {
					t.Fatal(err)
				}
				if a.P != b.P {
					t.Errorf("%v: p = %v, mirrored %v", alt, a.P, b.P)
				}
			}
		})
	}
}

func TestPairBySeed(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name       string
		base, cand map[uint64]float64
		want       Pairs
	}{
		{"common seeds in ascending order", map[uint64]float64{3: 30, 1: 10, 2: 20}, map[uint64]float64{2: 2, 3: 3, 1: 1},
			Pairs{Seeds: []uint64{1, 2, 3}, Baseline: []float64{10, 20, 30}, Candidate: []float64{1, 2, 3}, Common: 3}},
		{"seeds of one arm only are left out", map[uint64]float64{1: 10, 2: 20}, map[uint64]float64{2: 2, 5: 5},
			Pairs{Seeds: []uint64{2}, Baseline: []float64{20}, Candidate: []float64{2}, Common: 1}},
		{"unusable seeds are left out but counted", map[uint64]float64{1: inf, 2: 0, 3: 30, 4: 40}, map[uint64]float64{1: 1, 2: 2, 3: math.NaN(), 4: 4},
			Pairs{Seeds: []uint64{4}, Baseline: []float64{40}, Candidate: []float64{4}, Common: 4}},
		{"no seed in common", map[uint64]float64{1: 1}, map[uint64]float64{2: 2}, Pairs{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PairBySeed(tt.base, tt.cand)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
