package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/stats"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

func init() {
	register(command{name: "compare", summary: "paired one-sided Wilcoxon of two arms' saved per-seed results, with the median change and a bootstrap CI", run: runCompare})
}

// higherIsBetter are the metrics where a larger value is the improvement.
var higherIsBetter = []string{"req/s", "hit rate"}

// metricFlagName is how a metric is written on the command line: "TTFT p95" -> ttft_p95,
// "req/s" -> req_per_s, "miss@150ms" -> miss_150ms.
func metricFlagName(name string) string {
	r := strings.NewReplacer(" ", "_", "/", "_per_", "@", "_")
	return strings.ToLower(r.Replace(name))
}

// metricByFlag finds a metric by its command-line name or its table name.
func metricByFlag(s string) (analysis.Metric, bool) {
	for _, m := range analysis.Metrics {
		if s == m.Name || strings.ToLower(s) == metricFlagName(m.Name) {
			return m, true
		}
	}
	return analysis.Metric{}, false
}

// runCompare is `loadaware-bench compare CANDIDATE BASELINE -metric M`.
func runCompare(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var names []string
	for _, m := range analysis.Metrics {
		names = append(names, metricFlagName(m.Name))
	}
	dir := fs.String("dir", "bench-results", "results directory written by sweep or live")
	metric := fs.String("metric", "ttft_p95", "metric: "+strings.Join(names, ", "))
	alpha := fs.Float64("alpha", analysis.Alpha, "significance threshold of the one-sided p-value")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: loadaware-bench compare [flags] CANDIDATE BASELINE\n\nCompares two arms of a results directory seed by seed.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 2 {
		fmt.Fprintf(stderr, "loadaware-bench compare: want two arms, CANDIDATE and BASELINE (e.g. loadaware-b1 kvaware); got %d arguments\n", len(pos))
		return 2
	}
	met, ok := metricByFlag(*metric)
	if !ok {
		fmt.Fprintf(stderr, "loadaware-bench compare: unknown metric %q: use one of %s\n", *metric, strings.Join(names, ", "))
		return 2
	}
	res, meta, err := loadResults(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "loadaware-bench compare: %v\n", err)
		return 1
	}
	c, err := comparePaired(res, pos[0], pos[1], met)
	if err != nil {
		fmt.Fprintf(stderr, "loadaware-bench compare: %v\n", err)
		return 1
	}
	c.write(stdout, *dir, meta.Mode, *alpha)
	return 0
}

// pairedResult is one comparison, oriented so that "improvement" means better.
type pairedResult struct {
	candidate, baseline string
	metric              string
	higher              bool // a larger value is better
	candMedian          float64
	baseMedian          float64
	stats.Comparison
}

// comparePaired pairs the two arms' per-seed values of met by seed and runs the one-sided
// exact Wilcoxon signed-rank test (H1: the candidate is better), with the median relative
// change and its bootstrap interval.
func comparePaired(res vtime.Results, candidate, baseline string, met analysis.Metric) (pairedResult, error) {
	byArm := map[string]map[uint64]float64{}
	for _, r := range res.Runs {
		if byArm[r.Arm.Name] == nil {
			byArm[r.Arm.Name] = map[uint64]float64{}
		}
		byArm[r.Arm.Name][r.Seed] = met.Value(analysis.SeedMetricsOf(r))
	}
	var arms []string
	for _, r := range res.Runs {
		if !slices.Contains(arms, r.Arm.Name) {
			arms = append(arms, r.Arm.Name)
		}
	}
	for _, a := range []string{candidate, baseline} {
		if byArm[a] == nil {
			return pairedResult{}, fmt.Errorf("arm %q: %w in the results (arms: %s)", a, errNoRuns, strings.Join(arms, ", "))
		}
	}
	var seeds []uint64
	for s := range byArm[baseline] {
		if _, ok := byArm[candidate][s]; ok {
			seeds = append(seeds, s)
		}
	}
	slices.Sort(seeds)
	if len(seeds) == 0 {
		return pairedResult{}, fmt.Errorf("%s and %s share no seed: run both arms on the same seeds", candidate, baseline)
	}
	p := pairedResult{candidate: candidate, baseline: baseline, metric: met.Name, higher: slices.Contains(higherIsBetter, met.Name)}
	b, c := make([]float64, len(seeds)), make([]float64, len(seeds))
	for i, s := range seeds {
		b[i], c[i] = byArm[baseline][s], byArm[candidate][s]
	}
	p.baseMedian, p.candMedian = stats.Median(b), stats.Median(c)
	if p.higher { // test -x: "lower is better" on the negated values is "higher is better"
		for i := range b {
			b[i], c[i] = -b[i], -c[i]
		}
	}
	cmp, err := stats.ComparePaired(b, c, analysis.BootstrapLevel, analysis.BootstrapResamples, analysis.BootstrapSeed)
	if err != nil {
		return pairedResult{}, fmt.Errorf("%s vs %s on %s: %w", candidate, baseline, met.Name, err)
	}
	p.Comparison = cmp
	return p, nil
}

func (p pairedResult) write(w io.Writer, dir, mode string, alpha float64) {
	better, change := "lower", "reduction"
	red, lo, hi := p.Reduction, p.CI.Lo, p.CI.Hi
	if p.higher {
		// The test ran on negated values, where the reduction is still (b-c)/b of the
		// original values: the relative increase is its opposite.
		better, change = "higher", "increase"
		red, lo, hi = -p.Reduction, -p.CI.Hi, -p.CI.Lo
	}
	fmt.Fprintf(w, "%s vs %s on %s (%s is better), %d paired seeds from %s (%s)\n", p.candidate, p.baseline, p.metric, better, p.Seeds, dir, mode)
	fmt.Fprintf(w, "  median over seeds: %s %s, %s %s\n", p.candidate, fmtMetric(p.metric, p.candMedian), p.baseline, fmtMetric(p.metric, p.baseMedian))
	fmt.Fprintf(w, "  seeds improved: %d of %d\n", p.Improved, p.Seeds)
	fmt.Fprintf(w, "  median relative %s: %+.1f%% (%.0f%% bootstrap CI %+.1f%% to %+.1f%%, %d resamples, seed %d)\n",
		change, 100*red, 100*p.CI.Level, 100*lo, 100*hi, analysis.BootstrapResamples, analysis.BootstrapSeed)
	fmt.Fprintf(w, "  one-sided exact Wilcoxon signed-rank (H1: %s is %s): W+ = %g, n = %d non-zero pairs, p = %.4g\n",
		p.candidate, better, p.Test.WPlus, p.Test.N, p.Test.P)
	verdict := "no (a null result)"
	if p.Significant(alpha) {
		verdict = "yes"
	}
	fmt.Fprintf(w, "  significant at alpha %g: %s\n", alpha, verdict)
}
