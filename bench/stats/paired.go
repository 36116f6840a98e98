package stats

import (
	"fmt"
	"math"
	"slices"
)

// Alpha is the benchmark's significance threshold for a one-sided paired
// test: 0.05, Bonferroni-corrected for its two primary metrics (TTFT p95 and
// imbalance).
const Alpha = 0.025

// Bootstrap says how the interval of a paired comparison is drawn: Resamples
// draws with replacement from a PCG generator seeded with Seed, at coverage
// Level. Resamples 0 draws no interval.
type Bootstrap struct {
	Level     float64
	Resamples int
	Seed      uint64
}

// DefaultBootstrap is every report's interval: 95%, 10000 resamples, seed 1,
// so a report repeats exactly.
var DefaultBootstrap = Bootstrap{Level: 0.95, Resamples: 10000, Seed: 1}

// Pairs are two arms' values of one metric lined up by seed.
type Pairs struct {
	Seeds               []uint64  // ascending
	Baseline, Candidate []float64 // Baseline[i] and Candidate[i] are seed Seeds[i]'s
	Common              int       // seeds both arms have, usable or not
}

// PairBySeed lines up two arms' per-seed values (seed -> value): the seeds
// both have, in ascending order, leaving out a seed where either value is not
// finite (a failed seed; an engine idle through a short seed makes the
// imbalance +Inf) or the baseline is zero (the relative change is undefined).
func PairBySeed(baseline, candidate map[uint64]float64) Pairs {
	var p Pairs
	for s := range baseline {
		if _, ok := candidate[s]; ok {
			p.Seeds = append(p.Seeds, s)
		}
	}
	slices.Sort(p.Seeds)
	p.Common = len(p.Seeds)
	kept := p.Seeds[:0]
	for _, s := range p.Seeds {
		b, c := baseline[s], candidate[s]
		if Finite(b) && Finite(c) && b != 0 {
			kept = append(kept, s)
			p.Baseline, p.Candidate = append(p.Baseline, b), append(p.Candidate, c)
		}
	}
	p.Seeds = kept
	return p
}

// Finite reports whether x is a number: neither NaN nor an infinity.
func Finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Comparison is the paired comparison of a candidate arm with a baseline arm
// on one metric where smaller is better (latency, imbalance).
type Comparison struct {
	Seeds     int            // paired seeds
	Improved  int            // seeds where the candidate is strictly smaller
	Reduction float64        // median relative reduction (baseline-candidate)/baseline
	CI        Interval       // bootstrap interval of Reduction (zero without resamples)
	Test      WilcoxonResult // one-sided: candidate smaller than baseline
	Worse     WilcoxonResult // one-sided: candidate larger than baseline
}

// Significant reports whether the candidate is smaller with p below alpha.
func (c Comparison) Significant(alpha float64) bool { return c.Test.P < alpha }

// SignificantlyWorse reports whether the candidate is larger with p below alpha.
func (c Comparison) SignificantlyWorse(alpha float64) bool { return c.Worse.P < alpha }

// ComparePaired compares candidate with baseline seed by seed (index i of both
// slices is one seed, e.g. Pairs.Baseline and Pairs.Candidate): the one-sided
// exact Wilcoxon signed-rank tests in both directions, the median relative
// reduction, and its percentile bootstrap interval drawn as boot says.
func ComparePaired(baseline, candidate []float64, boot Bootstrap) (Comparison, error) {
	red, err := RelativeReductions(baseline, candidate)
	if err != nil {
		return Comparison{}, err
	}
	if len(red) == 0 {
		return Comparison{}, ErrEmpty
	}
	c := Comparison{Seeds: len(red), Reduction: Median(red)}
	if c.Test, err = WilcoxonPaired(baseline, candidate, Greater); err != nil {
		return Comparison{}, err
	}
	if c.Worse, err = WilcoxonPaired(candidate, baseline, Greater); err != nil {
		return Comparison{}, err
	}
	if boot.Resamples > 0 {
		if c.CI, err = BootstrapCI(red, Median, boot.Level, boot.Resamples, boot.Seed); err != nil {
			return Comparison{}, err
		}
	}
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
