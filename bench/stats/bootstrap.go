package stats

import (
	"fmt"
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
