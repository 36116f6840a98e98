package stats

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Alternative names the alternative hypothesis of a test on differences d.
type Alternative int

const (
	// Greater: the differences tend to be positive (W+ large).
	Greater Alternative = iota
	// Less: the differences tend to be negative (W+ small).
	Less
	// TwoSided: the differences are not symmetric about zero.
	TwoSided
)

// MaxWilcoxonPairs bounds the number of non-zero differences the exact test
// accepts; its null distribution costs O(n^3) time and O(n^2) memory.
const MaxWilcoxonPairs = 1000

// WilcoxonResult is the outcome of a Wilcoxon signed-rank test.
type WilcoxonResult struct {
	N           int         // non-zero differences used (zeros are dropped)
	Zeros       int         // zero differences dropped
	Ties        bool        // some |d| tied and got average ranks
	WPlus       float64     // sum of the ranks of the positive differences
	P           float64     // exact p-value for Alternative
	Alternative Alternative // the alternative tested
}

// WilcoxonSignedRank runs the exact Wilcoxon signed-rank test on the
// differences d (one per paired seed).
//
// Zero and tie handling follow scipy.stats.wilcoxon's defaults: zero
// differences are discarded (zero_method "wilcox"), tied |d| get the average of
// their ranks, and the statistic is W+, the sum of the ranks of the positive
// differences. The p-value is computed from the exact null distribution of W+
// over all 2^n equally likely sign assignments of the (average) ranks, which is
// the classical exact distribution when there are no ties and the exhaustive
// permutation distribution scipy uses for small tied samples otherwise. With
// every difference zero the test has no information and P is 1.
func WilcoxonSignedRank(d []float64, alt Alternative) (WilcoxonResult, error) {
	if alt != Greater && alt != Less && alt != TwoSided {
		return WilcoxonResult{}, fmt.Errorf("stats: unknown alternative %d: use Greater, Less or TwoSided", int(alt))
	}
	res := WilcoxonResult{Alternative: alt}
	var nz []float64
	for i, x := range d {
		if !Finite(x) {
			return WilcoxonResult{}, fmt.Errorf("stats: difference %d is %v: drop failed seeds before testing", i, x)
		}
		if x == 0 {
			res.Zeros++
			continue
		}
		nz = append(nz, x)
	}
	res.N = len(nz)
	if res.N == 0 {
		res.P = 1
		return res, nil
	}
	if res.N > MaxWilcoxonPairs {
		return WilcoxonResult{}, fmt.Errorf("stats: %d non-zero differences exceed the exact test's limit of %d", res.N, MaxWilcoxonPairs)
	}
	ranks2, ties := doubledRanks(nz)
	res.Ties = ties
	obs2 := 0 // 2*W+
	total2 := 0
	for i, x := range nz {
		total2 += ranks2[i]
		if x > 0 {
			obs2 += ranks2[i]
		}
	}
	res.WPlus = float64(obs2) / 2
	pdf := signedRankNull(ranks2, total2)
	var upper, lower float64 // P(W+ >= obs), P(W+ <= obs)
	for s, p := range pdf {
		if s >= obs2 {
			upper += p
		}
		if s <= obs2 {
			lower += p
		}
	}
	switch alt {
	case Greater:
		res.P = upper
	case Less:
		res.P = lower
	case TwoSided:
		res.P = math.Min(1, 2*math.Min(upper, lower))
	}
	res.P = math.Min(1, res.P)
	return res, nil
}

// WilcoxonPaired tests the paired samples x and y through d = x - y.
func WilcoxonPaired(x, y []float64, alt Alternative) (WilcoxonResult, error) {
	if len(x) != len(y) {
		return WilcoxonResult{}, fmt.Errorf("stats: paired samples differ in length (%d and %d): pass one value per seed to each", len(x), len(y))
	}
	d := make([]float64, len(x))
	for i := range x {
		d[i] = x[i] - y[i]
	}
	return WilcoxonSignedRank(d, alt)
}

// doubledRanks returns twice the average rank of each |x| (integers, since
// average ranks are multiples of one half) and whether any tie occurred.
func doubledRanks(xs []float64) ([]int, bool) {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		return cmp.Compare(math.Abs(xs[a]), math.Abs(xs[b]))
	})
	out := make([]int, len(xs))
	ties := false
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && math.Abs(xs[idx[j]]) == math.Abs(xs[idx[i]]) {
			j++
		}
		if j-i > 1 {
			ties = true
		}
		// Ranks i+1..j averaged: (i+1+j)/2; doubled: i+1+j.
		for k := i; k < j; k++ {
			out[idx[k]] = i + 1 + j
		}
		i = j
	}
	return out, ties
}

// signedRankNull returns the null distribution of 2*W+ over all sign
// assignments: pdf[s] = P(2*W+ = s), each rank positive with probability 1/2.
func signedRankNull(ranks2 []int, total2 int) []float64 {
	pdf := make([]float64, total2+1)
	pdf[0] = 1
	reach := 0
	for _, r := range ranks2 {
		for s := reach; s >= 0; s-- {
			p := pdf[s] / 2
			pdf[s] = p
			pdf[s+r] += p
		}
		reach += r
	}
	return pdf
}
