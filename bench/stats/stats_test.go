package stats

import (
	"math"
	"testing"
)

func near(a, b, tol float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b))
}

// Expected values from numpy.percentile (default linear interpolation).
func TestPercentile(t *testing.T) {
	sample := []float64{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"minimum", sample, 0, 1},
		{"p10 lands on a rank", sample, 10, 1},
		{"median", sample, 50, 4},
		{"p90", sample, 90, 6},
		{"p95 interpolates", sample, 95, 7.5},
		{"p99 interpolates", sample, 99, 8.7},
		{"maximum", sample, 100, 9},
		{"single value", []float64{0.5}, 99, 0.5},
		{"two values p25", []float64{2, 1}, 25, 1.25},
		{"empty is NaN", nil, 50, math.NaN()},
		{"p above 100 is NaN", sample, 101, math.NaN()},
		{"negative p is NaN", sample, -1, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.xs, tt.p); !near(got, tt.want, 1e-12) {
				t.Fatalf("Percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
			}
		})
	}
}

func TestPercentilesMatchesPercentileAndKeepsInput(t *testing.T) {
	xs := []float64{5, 3, 1, 4}
	ps := []float64{0, 33, 50, 95, 100, 120}
	got := Percentiles(xs, ps...)
	for i, p := range ps {
		if want := Percentile(xs, p); !near(got[i], want, 0) {
			t.Errorf("Percentiles p%v = %v, Percentile = %v", p, got[i], want)
		}
	}
	if xs[0] != 5 || xs[3] != 4 {
		t.Errorf("input was reordered: %v", xs)
	}
}

func TestMedianSkippingNaN(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		xs   []float64
		want float64
	}{
		{"no NaN is Median", []float64{3, 1, 2}, 2},
		{"NaN left out", []float64{nan, 3, nan, 1}, 2},
		{"infinity counts", []float64{1, inf, inf, nan}, inf},
		{"only NaN is NaN", []float64{nan, nan}, nan},
		{"empty is NaN", nil, nan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.xs...)
			if got := MedianSkippingNaN(in); got != tt.want && !(math.IsNaN(got) && math.IsNaN(tt.want)) {
				t.Fatalf("MedianSkippingNaN(%v) = %v, want %v", tt.xs, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.xs[i] && !math.IsNaN(tt.xs[i]) {
					t.Fatalf("input changed: %v, was %v", in, tt.xs)
				}
			}
		})
	}
}

func TestMean(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want float64
	}{
		{"values", []float64{1, 2, 3, 6}, 3},
		{"empty is NaN", nil, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Mean(tt.xs); !near(got, tt.want, 1e-15) {
				t.Fatalf("Mean = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRelativeReductions(t *testing.T) {
	got, err := RelativeReductions([]float64{2, 4, 1}, []float64{1, 5, 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0.5, -0.25, 0}
	for i := range want {
		if !near(got[i], want[i], 1e-15) {
			t.Errorf("reduction %d = %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := RelativeReductions([]float64{0}, []float64{1}); err == nil {
		t.Error("zero baseline: want an error")
	}
	if _, err := RelativeReductions([]float64{1, 2}, []float64{1}); err == nil {
		t.Error("unequal lengths: want an error")
	}
}

func TestNearestPercentiles(t *testing.T) {
	ten := []float64{9, 8, 7, 6, 5, 4, 3, 2, 1, 0} // sorted: 0..9, n-1 = 9
	cases := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{ten, 0, 0},
		{ten, 100, 9},
		{ten, 50, 4},                         // rank 4.5 -> 4 (half to even)
		{ten, 90, 8},                         // rank 8.1 -> 8
		{ten, 95, 9},                         // rank 8.55 -> 9
		{ten, 99, 9},                         // rank 8.91 -> 9
		{ten[:9], 50, 5},                     // sorted 1..9, rank 4 -> 5
		{[]float64{0, 1, 2, 3}, 50, 2},       // rank 1.5 -> 2 (even)
		{[]float64{0, 1, 2, 3, 4, 5}, 50, 2}, // rank 2.5 -> 2 (even), not 3
		{[]float64{0, 1, 2, 3, 4, 5}, 30, 2}, // rank 1.5 -> 2
		{[]float64{7}, 99, 7},
		{nil, 50, math.NaN()},
		{ten, -1, math.NaN()},
		{ten, 101, math.NaN()},
		{ten, math.NaN(), math.NaN()},
	}
	for _, tc := range cases {
		got := NearestPercentiles(tc.xs, tc.p)[0]
		if !(got == tc.want || math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("NearestPercentiles(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
		}
	}
	if ten[0] != 9 {
		t.Error("NearestPercentiles sorted its input")
	}
}
