package picker

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestSelectKthAgreesWithSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		name string
		gen  func(i int) time.Duration
		n    int
	}{
		{"one", func(int) time.Duration { return 7 }, 1},
		{"equal", func(int) time.Duration { return 3 }, 100},
		{"ascending", func(i int) time.Duration { return time.Duration(i) }, 257},
		{"descending", func(i int) time.Duration { return time.Duration(-i) }, 257},
		{"few values", func(int) time.Duration { return time.Duration(rng.IntN(4)) }, 1000},
		{"random", func(int) time.Duration { return time.Duration(rng.Int64N(1e6)) }, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := make([]time.Duration, tc.n)
			for i := range s {
				s[i] = tc.gen(i)
			}
			sorted := slices.Sorted(slices.Values(s))
			for _, k := range []int{0, tc.n / 2, quantileIndex(tc.n, 0.99), tc.n - 1} {
				c := slices.Clone(s)
				if got := selectKth(c, k); got != sorted[k] {
					t.Errorf("k=%d: %v, want %v", k, got, sorted[k])
				}
			}
		})
	}
}

// TestPairedP99Ratio checks the interval on samples whose answer is known: a round-by-round
// copy (ratio 1, interval 1), a copy slowed by a fourth of the base's p99 (the control's
// case: interval above 1.1) and one slowed by 1% (interval straddling nothing above 1.1),
// all with a shared heavy-tailed noise that moves both sides of a round together, as the
// host does in the benchmark.
func TestPairedP99Ratio(t *testing.T) {
	const rounds = 8000
	rng := rand.New(rand.NewPCG(7, 8))
	base := make([]time.Duration, rounds)
	noise := make([]time.Duration, rounds)
	for i := range base {
		base[i] = 50*time.Microsecond + time.Duration(rng.Int64N(5000))
		if rng.IntN(50) == 0 { // a stall taken by the round (both arms)
			noise[i] = time.Duration(rng.Int64N(200_000))
		}
		base[i] += noise[i]
	}
	p99 := quantile(base, 0.99)
	for _, tc := range []struct {
		name    string
		add     time.Duration
		lo, hi  float64 // the interval must lie within [lo, hi]
		above11 bool    // whether the interval must exclude 1.1 from above
	}{
		{"same", 0, 1, 1, false},
		{"slowed by a quarter of p99", p99 / 4, 1.15, 1.35, true},
		{"slowed by 1% of p99", p99 / 100, 1, 1.05, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			this := make([]time.Duration, rounds)
			for i := range this {
				this[i] = base[i] + tc.add
			}
			r := pairedP99Ratio(base, this, 64, 300, rand.New(rand.NewPCG(1, 1)))
			if r.lo > r.ratio || r.ratio > r.hi {
				t.Fatalf("point %.3f outside its interval [%.3f, %.3f]", r.ratio, r.lo, r.hi)
			}
			if r.lo < tc.lo || r.hi > tc.hi {
				t.Errorf("ratio %.3f [%.3f, %.3f], want the interval within [%.2f, %.2f]", r.ratio, r.lo, r.hi, tc.lo, tc.hi)
			}
			if (r.lo > 1.1) != tc.above11 {
				t.Errorf("ratio %.3f [%.3f, %.3f]: interval above 1.1 is %v, want %v", r.ratio, r.lo, r.hi, r.lo > 1.1, tc.above11)
			}
		})
	}
	if r := pairedP99Ratio(base[:100], base[:100], 64, 100, rng); r.lo != r.ratio || r.hi != r.ratio {
		t.Errorf("one block: interval [%.3f, %.3f] around %.3f, want the point", r.lo, r.hi, r.ratio)
	}
}
