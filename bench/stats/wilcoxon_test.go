package stats

import (
	"math"
	"testing"
)

// Reference values: scipy 1.10.1, stats.wilcoxon(d, alternative=alt,
// method="exact") for the untied samples; for the tied samples (where scipy's
// exact mode ignores ties) stats.permutation_test over all sign flips of the
// non-zero differences with the statistic sum(rankdata(|d|) * (d > 0)), which
// is what scipy's default uses for small tied samples.
func TestWilcoxonSignedRankMatchesScipy(t *testing.T) {
	distinct := []float64{1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30, -0.72, 0.41, -1.1}
	mixed20 := []float64{0.12, -0.05, 0.33, 0.21, -0.08, 0.4, 0.17, 0.09, -0.22, 0.31, 0.27, 0.05001, 0.14, -0.02, 0.36, 0.19, 0.11, 0.25, -0.13, 0.29}
	allNeg := []float64{-1, -2, -3, -4, -5, -6, -7, -8.5}
	ties := []float64{1, 1, 2, 2, 2, -1, 3, 3, -3, 4}
	zerosTies := []float64{0, 0, 1.5, -1.5, 2, 2, 2.5, 3, -0.5, 0, 4}
	tests := []struct {
		name      string
		d         []float64
		alt       Alternative
		wantW     float64
		wantP     float64
		wantN     int
		wantZeros int
		wantTies  bool
	}{
		{"distinct greater", distinct, Greater, 71, 0.004638671875, 12, 0, false},
		{"distinct less", distinct, Less, 71, 0.99658203125, 12, 0, false},
		{"distinct two-sided", distinct, TwoSided, 71, 0.00927734375, 12, 0, false},
		{"twenty seeds greater", mixed20, Greater, 182, 0.0013561248779296875, 20, 0, false},
		{"twenty seeds less", mixed20, Less, 182, 0.9988374710083008, 20, 0, false},
		{"twenty seeds two-sided", mixed20, TwoSided, 182, 0.002712249755859375, 20, 0, false},
		{"all negative greater", allNeg, Greater, 0, 1, 8, 0, false},
		{"all negative less", allNeg, Less, 0, 0.00390625, 8, 0, false},
		{"all negative two-sided", allNeg, TwoSided, 0, 0.0078125, 8, 0, false},
		{"ties greater", ties, Greater, 45, 0.0439453125, 10, 0, true},
		{"ties less", ties, Less, 45, 0.96875, 10, 0, true},
		{"ties two-sided", ties, TwoSided, 45, 0.087890625, 10, 0, true},
		{"zeros dropped greater", zerosTies, Greater, 32.5, 0.0234375, 8, 3, true},
		{"zeros dropped less", zerosTies, Less, 32.5, 0.984375, 8, 3, true},
		{"zeros dropped two-sided", zerosTies, TwoSided, 32.5, 0.046875, 8, 3, true},
		{"twenty of twenty improve", seq(1, 20), Greater, 210, 1.0 / (1 << 20), 20, 0, false},
		{"only zeros carry no evidence", []float64{0, 0, 0}, Greater, 0, 1, 0, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WilcoxonSignedRank(tt.d, tt.alt)
			if err != nil {
				t.Fatal(err)
			}
			if got.WPlus != tt.wantW || got.N != tt.wantN || got.Zeros != tt.wantZeros || got.Ties != tt.wantTies {
				t.Errorf("W+=%v N=%d zeros=%d ties=%v, want W+=%v N=%d zeros=%d ties=%v",
					got.WPlus, got.N, got.Zeros, got.Ties, tt.wantW, tt.wantN, tt.wantZeros, tt.wantTies)
			}
			if !near(got.P, tt.wantP, 1e-12) {
				t.Errorf("p = %.17g, want %.17g", got.P, tt.wantP)
			}
		})
	}
}

func seq(lo, hi int) []float64 {
	var out []float64
	for i := lo; i <= hi; i++ {
		out = append(out, float64(i))
	}
	return out
}

// The classical table of subset counts of {1..5} by sum.
func TestSignedRankNullMatchesSubsetCounts(t *testing.T) {
	ranks2 := []int{2, 4, 6, 8, 10}
	pdf := signedRankNull(ranks2, 30)
	counts := []int{1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 2, 2, 1, 1, 1}
	for w, c := range counts {
		if got := pdf[2*w] * 32; !near(got, float64(c), 1e-12) {
			t.Errorf("count of W+=%d = %v, want %d", w, got, c)
		}
		if w > 0 && pdf[2*w-1] != 0 {
			t.Errorf("odd doubled sum %d has mass %v", 2*w-1, pdf[2*w-1])
		}
	}
}

func TestWilcoxonPaired(t *testing.T) {
	base := []float64{0.32, 0.30, 0.35, 0.31}
	cand := []float64{0.27, 0.28, 0.30, 0.32}
	got, err := WilcoxonPaired(base, cand, Greater)
	if err != nil {
		t.Fatal(err)
	}
	d := []float64{0.32 - 0.27, 0.30 - 0.28, 0.35 - 0.30, 0.31 - 0.32}
	want, err := WilcoxonSignedRank(d, Greater)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("paired = %+v, differences = %+v", got, want)
	}
}

func TestWilcoxonRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		d    []float64
		alt  Alternative
	}{
		{"NaN difference", []float64{1, math.NaN()}, Greater},
		{"infinite difference", []float64{math.Inf(1)}, Greater},
		{"unknown alternative", []float64{1}, Alternative(7)},
		{"too many pairs", seq(1, MaxWilcoxonPairs+1), Greater},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := WilcoxonSignedRank(tt.d, tt.alt); err == nil {
				t.Fatal("want an error")
			}
		})
	}
	if _, err := WilcoxonPaired([]float64{1}, []float64{1, 2}, Greater); err == nil {
		t.Error("unequal lengths: want an error")
	}
}

func FuzzWilcoxonSignedRank(f *testing.F) {
	f.Add(1.0, -2.0, 3.0, 0.0, 2.0)
	f.Add(0.0, 0.0, 0.0, 0.0, 0.0)
	f.Fuzz(func(t *testing.T, a, b, c, d, e float64) {
		xs := []float64{a, b, c, d, e}
		g, errG := WilcoxonSignedRank(xs, Greater)
		l, errL := WilcoxonSignedRank(xs, Less)
		if errG != nil || errL != nil {
			return
		}
		if g.P < 0 || g.P > 1 || l.P < 0 || l.P > 1 {
			t.Fatalf("p outside [0,1]: %v %v", g.P, l.P)
		}
		// The two tails overlap in the observed value, so they cover everything.
		if g.P+l.P < 1-1e-12 {
			t.Fatalf("tails %v + %v < 1", g.P, l.P)
		}
	})
}

func BenchmarkWilcoxonTwentySeeds(b *testing.B) {
	d := seq(-5, 14)
	for b.Loop() {
		if _, err := WilcoxonSignedRank(d, Greater); err != nil {
			b.Fatal(err)
		}
	}
}
