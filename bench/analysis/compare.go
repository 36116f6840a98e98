package analysis

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// HigherIsBetter are the metrics where a larger value is the improvement.
var HigherIsBetter = []string{"req/s", "hit rate"}

// ErrNoRuns is returned when an arm has no runs in the results.
var ErrNoRuns = errors.New("no runs")

// FlagName is how a metric is written on the command line: "TTFT p95" -> ttft_p95,
// "req/s" -> req_per_s, "miss@150ms" -> miss_150ms.
func FlagName(metric string) string {
	r := strings.NewReplacer(" ", "_", "/", "_per_", "@", "_")
	return strings.ToLower(r.Replace(metric))
}

// MetricByFlag finds a metric by its command-line name (FlagName) or its table name.
func MetricByFlag(s string) (Metric, bool) {
	for _, m := range Metrics {
		if s == m.Name || strings.ToLower(s) == FlagName(m.Name) {
			return m, true
		}
	}
	return Metric{}, false
}

// ArmComparison is one candidate arm against a baseline arm on one metric, oriented so
// that an improvement is a positive reduction whichever way the metric is better.
type ArmComparison struct {
	Candidate, Baseline    string
	Metric                 string
	Higher                 bool // a larger value is better: the test ran on negated values
	CandMedian, BaseMedian float64
	stats.Comparison
}

// CompareArms pairs two arms' per-seed values of met by seed and runs the paired
// comparison (stats.PairBySeed, stats.ComparePaired): the one-sided exact Wilcoxon
// signed-rank test (H1: the candidate is better), the median relative change and its
// bootstrap interval.
func CompareArms(res experiment.Results, candidate, baseline string, met Metric) (ArmComparison, error) {
	byArm := map[string]map[uint64]float64{}
	var arms []string
	for _, r := range res.Runs {
		if byArm[r.Arm.Name] == nil {
			byArm[r.Arm.Name] = map[uint64]float64{}
			arms = append(arms, r.Arm.Name)
		}
		byArm[r.Arm.Name][r.Seed] = met.Value(SeedMetricsOf(r))
	}
	return compareByArm(byArm, arms, candidate, baseline, met.Name)
}

// cellKeys are the capture metric keys of the metrics a capture's seeds have (the
// engine-side hit rate and the goodput miss share are not per-seed capture metrics).
var cellKeys = map[string]string{"TTFT p50": capture.TTFTP50, "TTFT p95": capture.TTFTP95, "TTFT p99": capture.TTFTP99,
	"ITL p95": capture.ITLP95, "e2e p95": capture.E2EP95, "req/s": capture.ReqS, "imbalance": capture.ImbalanceKey}

// CompareCells is CompareArms for captures in the published layout (a directory that
// `replay -real` reads, e.g. written by `loadaware-bench drive`): the arms are the cells'
// labels (Cell.ArmLabel), the values each seed's capture metrics.
func CompareCells(cells []capture.Cell, candidate, baseline string, met Metric) (ArmComparison, error) {
	key, ok := cellKeys[met.Name]
	if !ok {
		return ArmComparison{}, fmt.Errorf("%s is not a per-seed metric of a capture: compare captures on %s", met.Name, strings.Join(slices.Sorted(maps.Keys(cellKeys)), ", "))
	}
	byArm := map[string]map[uint64]float64{}
	var arms []string
	for _, c := range cells {
		ms, err := c.SeedMetrics()
		if err != nil {
			return ArmComparison{}, err
		}
		a := c.ArmLabel()
		if byArm[a] == nil {
			byArm[a] = map[uint64]float64{}
			arms = append(arms, a)
		}
		for i, s := range c.Seeds {
			byArm[a][uint64(s.Seed)] = ms[i][key]
		}
	}
	return compareByArm(byArm, arms, candidate, baseline, met.Name)
}

// compareByArm is the pairing and the test of CompareArms and CompareCells.
func compareByArm(byArm map[string]map[uint64]float64, arms []string, candidate, baseline, metric string) (ArmComparison, error) {
	met := Metric{Name: metric}
	for _, a := range []string{candidate, baseline} {
		if byArm[a] == nil {
			return ArmComparison{}, fmt.Errorf("arm %q: %w in the results (arms: %s)", a, ErrNoRuns, strings.Join(arms, ", "))
		}
	}
	c := ArmComparison{Candidate: candidate, Baseline: baseline, Metric: met.Name, Higher: slices.Contains(HigherIsBetter, met.Name)}
	p := stats.PairBySeed(byArm[baseline], byArm[candidate])
	if p.Common == 0 {
		return ArmComparison{}, fmt.Errorf("%s and %s share no seed: run both arms on the same seeds", candidate, baseline)
	}
	if len(p.Seeds) == 0 {
		return ArmComparison{}, fmt.Errorf("%s vs %s on %s: none of the %d common seeds has finite values of both arms and a non-zero baseline", candidate, baseline, met.Name, p.Common)
	}
	b, x := p.Baseline, p.Candidate
	c.BaseMedian, c.CandMedian = stats.Median(b), stats.Median(x)
	if c.Higher { // test -x: "lower is better" on the negated values is "higher is better"
		for i := range b {
			b[i], x[i] = -b[i], -x[i]
		}
	}
	cmp, err := stats.ComparePaired(b, x, stats.DefaultBootstrap)
	if err != nil {
		return ArmComparison{}, fmt.Errorf("%s vs %s on %s: %w", candidate, baseline, met.Name, err)
	}
	c.Comparison = cmp
	return c, nil
}

// WriteText writes the comparison as `loadaware-bench compare` prints it: dir and mode say
// where the runs came from, alpha is the significance threshold.
func (c ArmComparison) WriteText(w io.Writer, dir, mode string, alpha float64) {
	better, change := "lower", "reduction"
	red, lo, hi := c.Reduction, c.CI.Lo, c.CI.Hi
	if c.Higher {
		// The test ran on negated values, where the reduction is still (b-c)/b of the
		// original values: the relative increase is its opposite.
		better, change = "higher", "increase"
		red, lo, hi = -c.Reduction, -c.CI.Hi, -c.CI.Lo
	}
	boot := stats.DefaultBootstrap
	fmt.Fprintf(w, "%s vs %s on %s (%s is better), %d paired seeds from %s (%s)\n", c.Candidate, c.Baseline, c.Metric, better, c.Seeds, dir, mode)
	fmt.Fprintf(w, "  median over seeds: %s %s, %s %s\n", c.Candidate, FormatMetric(c.Metric, c.CandMedian), c.Baseline, FormatMetric(c.Metric, c.BaseMedian))
	fmt.Fprintf(w, "  seeds improved: %d of %d\n", c.Improved, c.Seeds)
	fmt.Fprintf(w, "  median relative %s: %+.1f%% (%.0f%% bootstrap CI %+.1f%% to %+.1f%%, %d resamples, seed %d)\n",
		change, 100*red, 100*c.CI.Level, 100*lo, 100*hi, boot.Resamples, boot.Seed)
	fmt.Fprintf(w, "  one-sided exact Wilcoxon signed-rank (H1: %s is %s): W+ = %g, n = %d non-zero pairs, p = %.4g\n",
		c.Candidate, better, c.Test.WPlus, c.Test.N, c.Test.P)
	verdict := "no (a null result)"
	if c.Significant(alpha) {
		verdict = "yes"
	}
	fmt.Fprintf(w, "  significant at alpha %g: %s\n", alpha, verdict)
}
