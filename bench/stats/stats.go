// Package stats holds the statistics the benchmark reports: percentiles
// (interpolated, Percentile; or the nearest sample, NearestPercentiles),
// the one-sided exact Wilcoxon signed-rank test on paired seeds, the median
// relative reduction and its bootstrap confidence interval.
//
// Every function is pure and deterministic: randomness comes only from an
// explicit seed. Nothing here reads clocks, files or globals.
package stats

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrEmpty is returned when a statistic needs at least one observation.
var ErrEmpty = errors.New("stats: no observations")

// Percentile returns the p-th percentile (0 <= p <= 100) of xs with linear
// interpolation between closest ranks (numpy's default, "type 7"): the value at
// fractional rank p/100*(n-1) of the sorted sample. It returns NaN for an empty
// sample or a p outside [0, 100]. xs is not modified.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 || p < 0 || p > 100 || math.IsNaN(p) {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return sortedPercentile(s, p)
}

// Percentiles returns the percentiles ps of xs (see Percentile), sorting once.
func Percentiles(xs []float64, ps ...float64) []float64 {
	out := make([]float64, len(ps))
	s := slices.Clone(xs)
	slices.Sort(s)
	for i, p := range ps {
		if len(s) == 0 || p < 0 || p > 100 || math.IsNaN(p) {
			out[i] = math.NaN()
			continue
		}
		out[i] = sortedPercentile(s, p)
	}
	return out
}

func sortedPercentile(s []float64, p float64) float64 {
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	if lo == hi {
		return s[lo]
	}
	frac := pos - float64(lo)
	return s[lo] + (s[hi]-s[lo])*frac
}

// NearestPercentiles returns the p-th percentile (0 <= p <= 100) of xs for
// each p in ps as the published summary-per-seed.csv computed it: the element
// of the ascending sample at 0-based rank p/100*(n-1) rounded to the nearest
// integer, halves to even (numpy's method="nearest"), with no interpolation.
// An empty sample or a p outside [0, 100] gives NaN. xs is not modified.
func NearestPercentiles(xs []float64, ps ...float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	out := make([]float64, len(ps))
	for i, p := range ps {
		if len(s) == 0 || !(p >= 0 && p <= 100) {
			out[i] = math.NaN()
			continue
		}
		out[i] = s[int(math.RoundToEven(p/100*float64(len(s)-1)))]
	}
	return out
}

// Median is Percentile(xs, 50).
func Median(xs []float64) float64 { return Percentile(xs, 50) }

// MedianSkippingNaN is the Median of xs's values that are not NaN (NaN when none is);
// infinities count as values. xs is not modified.
func MedianSkippingNaN(xs []float64) float64 {
	return Median(slices.DeleteFunc(slices.Clone(xs), math.IsNaN))
}

// Mean returns the arithmetic mean of xs, or NaN when xs is empty.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// RelativeReductions returns (baseline[i]-candidate[i])/baseline[i] for each
// pair: positive when the candidate is smaller (better for latency and
// imbalance). A zero baseline is an error: the reduction is undefined.
func RelativeReductions(baseline, candidate []float64) ([]float64, error) {
	if len(baseline) != len(candidate) {
		return nil, fmt.Errorf("stats: paired samples differ in length (%d baseline, %d candidate): pass one value per seed to each", len(baseline), len(candidate))
	}
	out := make([]float64, len(baseline))
	for i := range baseline {
		if baseline[i] == 0 {
			return nil, fmt.Errorf("stats: baseline %d is zero: relative reduction undefined", i)
		}
		out[i] = (baseline[i] - candidate[i]) / baseline[i]
	}
	return out, nil
}
