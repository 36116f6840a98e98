package stats

import (
	"math"
	"testing"
)

func TestBootstrapCI(t *testing.T) {
	xs := []float64{0.12, 0.05, 0.33, 0.21, -0.08, 0.4, 0.17, 0.09, -0.22, 0.31}
	a, err := BootstrapCI(xs, Median, 0.95, 2000, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, err := BootstrapCI(xs, Median, 0.95, 2000, 7)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("same seed gave %+v and %+v", a, b)
	}
	c, err := BootstrapCI(xs, Median, 0.95, 2000, 8)
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Errorf("different seeds gave the same interval %+v", a)
	}
	m := Median(xs)
	if !(a.Lo <= m && m <= a.Hi) || a.Lo >= a.Hi {
		t.Errorf("interval %+v does not bracket the median %v", a, m)
	}
	narrow, err := BootstrapCI(xs, Median, 0.5, 2000, 7)
	if err != nil {
		t.Fatal(err)
	}
	if narrow.Hi-narrow.Lo >= a.Hi-a.Lo {
		t.Errorf("50%% interval %+v is not narrower than 95%% %+v", narrow, a)
	}
	constant, err := BootstrapCI([]float64{3, 3, 3}, Median, 0.95, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	if constant.Lo != 3 || constant.Hi != 3 {
		t.Errorf("constant sample interval = %+v, want [3,3]", constant)
	}
}

func TestBootstrapCIRejectsBadInput(t *testing.T) {
	tests := []struct {
		name      string
		xs        []float64
		level     float64
		resamples int
	}{
		{"empty", nil, 0.95, 1000},
		{"level 1", []float64{1}, 1, 1000},
		{"level 0", []float64{1}, 0, 1000},
		{"too few resamples", []float64{1}, 0.95, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := BootstrapCI(tt.xs, Median, tt.level, tt.resamples, 1); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestComparePaired(t *testing.T) {
	base := []float64{2.4, 2.2, 2.6, 2.3, 2.5, 2.1, 2.7, 2.4}
	cand := []float64{1.2, 1.1, 1.3, 2.4, 1.2, 1.0, 1.4, 1.3}
	c, err := ComparePaired(base, cand, 0.95, 2000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.Seeds != 8 || c.Improved != 7 {
		t.Errorf("seeds=%d improved=%d, want 8 and 7", c.Seeds, c.Improved)
	}
	// Seven of eight reductions are positive and the one negative has rank 1:
	// W+ = 35 of 36, p = P(W+ >= 35) = 2/256.
	if c.Test.WPlus != 35 || !near(c.Test.P, 2.0/256, 1e-12) {
		t.Errorf("test = %+v, want W+=35 p=%v", c.Test, 2.0/256)
	}
	red, err := RelativeReductions(base, cand)
	if err != nil {
		t.Fatal(err)
	}
	if want := Median(red); c.Reduction != want {
		t.Errorf("reduction = %v, want %v", c.Reduction, want)
	}
	if !(c.CI.Lo <= c.Reduction && c.Reduction <= c.CI.Hi) {
		t.Errorf("CI %+v misses the reduction %v", c.CI, c.Reduction)
	}
	if !c.Significant(0.025) || c.Significant(0.001) {
		t.Errorf("Significant is wrong for p=%v", c.Test.P)
	}
	if _, err := ComparePaired(nil, nil, 0.95, 1000, 1); err == nil {
		t.Error("no seeds: want an error")
	}
	if _, err := ComparePaired([]float64{1}, []float64{math.NaN()}, 0.95, 1000, 1); err == nil {
		t.Error("NaN candidate: want an error")
	}
}
