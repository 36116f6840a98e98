package analysis

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// Baseline is the arm every other arm is compared with.
const Baseline = "kvaware"

// Alpha is the significance threshold of every paired test (stats.Alpha).
const Alpha = stats.Alpha

// ComparedMetrics are the metrics tested against the baseline: the two
// primary ones, then the headline goodput miss rate.
var ComparedMetrics = []string{"TTFT p95", "imbalance", "miss@150ms"}

// ArmSummary is one arm's medians over its seeds.
type ArmSummary struct {
	Arm     experiment.Arm
	Seeds   int
	Median  map[string]float64 // by Metric name
	Goodput []float64          // median over seeds, per objective
}

// Paired is one candidate arm against the baseline on one metric.
type Paired struct {
	Arm, Metric string
	stats.Comparison
}

// Check is one calibration tolerance.
type Check struct {
	Arm, Metric   string
	Got, Want     float64
	Tol           float64
	Relative      bool
	Pass          bool
	RelativeError float64 // (got-want)/want, for relative checks
}

// Ordering compares the order of the published arms on one metric.
type Ordering struct {
	Metric     string
	Published  []string // arm names, ascending
	Simulated  []string
	Discordant int // pairs of arms in opposite order
	Pairs      int
	Pass       bool // identical order
}

// Analysis is everything the report states.
type Analysis struct {
	Seeds       []SeedMetrics // in run order
	Arms        []ArmSummary  // in config order
	Comparisons []Paired
	Calibration []Check
	Orderings   []Ordering
	Reproduced  bool // every calibration check and ordering passes
}

// Analyze computes the metrics of every run, the medians per arm, the paired
// comparisons with the baseline and the calibration checks.
func Analyze(res experiment.Results) (Analysis, error) {
	if len(res.Runs) == 0 {
		return Analysis{}, errors.New("analysis: no runs: run a sweep first")
	}
	var a Analysis
	byArm := map[string][]SeedMetrics{}
	var arms []experiment.Arm
	for _, run := range res.Runs {
		m := SeedMetricsOf(run)
		a.Seeds = append(a.Seeds, m)
		if _, ok := byArm[run.Arm.Name]; !ok {
			arms = append(arms, run.Arm)
		}
		byArm[run.Arm.Name] = append(byArm[run.Arm.Name], m)
	}
	for _, arm := range arms {
		ms := byArm[arm.Name]
		s := ArmSummary{Arm: arm, Seeds: len(ms), Median: map[string]float64{}}
		for _, met := range Metrics {
			s.Median[met.Name] = medianOf(ms, met.Value)
		}
		for i := range Objectives() {
			s.Goodput = append(s.Goodput, medianOf(ms, func(m SeedMetrics) float64 { return m.Goodput[i] }))
		}
		a.Arms = append(a.Arms, s)
	}
	if base, ok := byArm[Baseline]; ok {
		for _, arm := range arms {
			if arm.Name == Baseline {
				continue
			}
			for _, name := range ComparedMetrics {
				met, _ := MetricByName(name)
				c, err := compareSeeds(base, byArm[arm.Name], met)
				if err != nil {
					return Analysis{}, fmt.Errorf("analysis: %s vs %s on %s: %w", arm.Name, Baseline, name, err)
				}
				a.Comparisons = append(a.Comparisons, Paired{Arm: arm.Name, Metric: name, Comparison: c})
			}
		}
	}
	a.Calibration = a.calibrate()
	a.Orderings = []Ordering{a.ordering("TTFT p95"), a.ordering("imbalance")}
	a.Reproduced = len(a.Calibration) > 0
	for _, c := range a.Calibration {
		a.Reproduced = a.Reproduced && c.Pass
	}
	for _, o := range a.Orderings {
		a.Reproduced = a.Reproduced && o.Pass
	}
	return a, nil
}

// Arm returns the summary of the named arm.
func (a Analysis) Arm(name string) (ArmSummary, bool) {
	for _, s := range a.Arms {
		if s.Arm.Name == name {
			return s, true
		}
	}
	return ArmSummary{}, false
}

// Comparison returns the paired result of arm against the baseline on metric.
func (a Analysis) Comparison(arm, metric string) (Paired, bool) {
	for _, c := range a.Comparisons {
		if c.Arm == arm && c.Metric == metric {
			return c, true
		}
	}
	return Paired{}, false
}

func medianOf(ms []SeedMetrics, f func(SeedMetrics) float64) float64 {
	xs := make([]float64, 0, len(ms))
	for _, m := range ms {
		if v := f(m); !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	return stats.Median(xs)
}

// compareSeeds pairs two arms' values of met by seed (stats.PairBySeed) and
// compares them (stats.ComparePaired with stats.DefaultBootstrap).
func compareSeeds(base, cand []SeedMetrics, met Metric) (stats.Comparison, error) {
	p := stats.PairBySeed(bySeed(base, met), bySeed(cand, met))
	switch {
	case p.Common == 0:
		return stats.Comparison{}, errors.New("no seed in common")
	case len(p.Seeds) == 0:
		return stats.Comparison{}, fmt.Errorf("none of the %d common seeds has finite values of both arms (an engine idle through every seed?): run longer seeds", p.Common)
	}
	return stats.ComparePaired(p.Baseline, p.Candidate, stats.DefaultBootstrap)
}

// bySeed maps each seed to its value of met.
func bySeed(ms []SeedMetrics, met Metric) map[uint64]float64 {
	out := make(map[uint64]float64, len(ms))
	for _, m := range ms {
		out[m.Seed] = met.Value(m)
	}
	return out
}

func (a Analysis) calibrate() []Check {
	var out []Check
	for _, p := range PublishedRows {
		if !p.Calibration {
			continue
		}
		s, ok := a.Arm(p.Arm)
		if !ok {
			continue
		}
		for _, t := range Tolerances {
			want, _ := p.value(t.Metric)
			got := s.Median[t.Metric]
			c := Check{Arm: p.Arm, Metric: t.Metric, Got: got, Want: want, Tol: t.Tol, Relative: t.Relative}
			if t.Relative {
				c.RelativeError = (got - want) / want
				c.Pass = math.Abs(c.RelativeError) <= t.Tol
			} else {
				c.Pass = math.Abs(got-want) <= t.Tol
			}
			out = append(out, c)
		}
	}
	return out
}

func (a Analysis) ordering(metric string) Ordering {
	o := Ordering{Metric: metric}
	type kv struct {
		arm       string
		pub, simv float64
	}
	var rows []kv
	for _, p := range PublishedRows {
		s, ok := a.Arm(p.Arm)
		if !ok {
			continue
		}
		want, _ := p.value(metric)
		rows = append(rows, kv{p.Arm, want, s.Median[metric]})
	}
	pub := slices.Clone(rows)
	slices.SortStableFunc(pub, func(x, y kv) int { return cmp.Compare(x.pub, y.pub) })
	sim := slices.Clone(rows)
	slices.SortStableFunc(sim, func(x, y kv) int { return cmp.Compare(x.simv, y.simv) })
	for i := range pub {
		o.Published = append(o.Published, pub[i].arm)
		o.Simulated = append(o.Simulated, sim[i].arm)
	}
	for i := range rows {
		for j := i + 1; j < len(rows); j++ {
			o.Pairs++
			if (rows[i].pub-rows[j].pub)*(rows[i].simv-rows[j].simv) < 0 {
				o.Discordant++
			}
		}
	}
	o.Pass = len(rows) > 1 && slices.Equal(o.Published, o.Simulated)
	return o
}
