package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Interval is a confidence interval [Lo, Hi] at Level (0.95 for 95%).
type Interval struct {
	Lo, Hi, Level float64
}

// BootstrapCI returns the percentile bootstrap confidence interval of stat
// over xs: resamples draws of len(xs) values with replacement, from a PCG
// generator seeded with seed, so the interval is exactly repeatable. level is
// the coverage (0 < level < 1) and resamples must be at least 100.
func BootstrapCI(xs []float64, stat func([]float64) float64, level float64, resamples int, seed uint64) (Interval, error) {
	if len(xs) == 0 {
		return Interval{}, ErrEmpty
	}
	if !(level > 0 && level < 1) {
		return Interval{}, fmt.Errorf("stats: confidence level %v outside (0, 1): use e.g. 0.95", level)
	}
	if resamples < 100 {
		return Interval{}, fmt.Errorf("stats: %d bootstrap resamples are too few: use at least 100 (10000 is usual)", resamples)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	boot := make([]float64, resamples)
	sample := make([]float64, len(xs))
	for b := range boot {
		for i := range sample {
			sample[i] = xs[rng.IntN(len(xs))]
		}
		boot[b] = stat(sample)
	}
	alpha := (1 - level) / 2
	ps := Percentiles(boot, 100*alpha, 100*(1-alpha))
	return Interval{Lo: ps[0], Hi: ps[1], Level: level}, nil
}

// Comparison is the paired comparison of a candidate arm with a baseline arm
// on one metric where smaller is better (latency, imbalance).
type Comparison struct {
	Seeds     int            // paired seeds
	Improved  int            // seeds where the candidate is strictly smaller
	Reduction float64        // median relative reduction (baseline-candidate)/baseline
	CI        Interval       // bootstrap interval of Reduction
	Test      WilcoxonResult // one-sided: candidate smaller than baseline
}

// Significant reports whether the one-sided p-value is below alpha.
func (c Comparison) Significant(alpha float64) bool { return c.Test.P < alpha }

// ComparePaired compares candidate with baseline seed by seed (index i of both
// slices is seed i): the one-sided exact Wilcoxon signed-rank test of
// baseline-candidate > 0, the median relative reduction, and its percentile
// bootstrap interval at level with the given resamples and seed.
func ComparePaired(baseline, candidate []float64, level float64, resamples int, seed uint64) (Comparison, error) {
	red, err := RelativeReductions(baseline, candidate)
	if err != nil {
		return Comparison{}, err
	}
	if len(red) == 0 {
		return Comparison{}, ErrEmpty
	}
	test, err := WilcoxonPaired(baseline, candidate, Greater)
	if err != nil {
		return Comparison{}, err
	}
	ci, err := BootstrapCI(red, Median, level, resamples, seed)
	if err != nil {
		return Comparison{}, err
	}
	c := Comparison{Seeds: len(red), Reduction: Median(red), CI: ci, Test: test}
	for i := range baseline {
		if candidate[i] < baseline[i] {
			c.Improved++
		}
	}
	if math.IsNaN(c.Reduction) {
		return Comparison{}, fmt.Errorf("stats: median reduction is NaN: check the per-seed values")
	}
	return c, nil
}
