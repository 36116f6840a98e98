package replay

import (
	"fmt"
	"math"
	"sort"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// OrderedMetrics are the metrics whose ordering of the arms is compared.
var OrderedMetrics = []string{capture.TTFTP95, capture.ImbalanceKey}

// Ordering is the arms sorted by one metric's median over seeds, lowest
// first, on each side, and the pairs of arms the two orders disagree on.
type Ordering struct {
	Real       []string    `json:"real"`
	Sim        []string    `json:"sim"`
	Discordant [][2]string `json:"discordant"`
}

func orderings(cells []Cell) map[string]Ordering {
	out := map[string]Ordering{}
	for _, m := range OrderedMetrics {
		real := map[string]float64{}
		sim := map[string]float64{}
		for _, c := range cells {
			real[c.Arm], sim[c.Arm] = c.Medians[m].Real, c.Medians[m].Sim
		}
		out[m] = Order(real, sim)
	}
	return out
}

// Order sorts the arms by their values on each side and lists the pairs whose
// order differs (a tie on one side and not the other counts as discordant).
func Order(real, sim map[string]float64) Ordering {
	var arms []string
	for a := range real {
		if _, ok := sim[a]; ok {
			arms = append(arms, a)
		}
	}
	sort.Strings(arms)
	by := func(v map[string]float64) []string {
		s := append([]string(nil), arms...)
		sort.SliceStable(s, func(i, j int) bool { return v[s[i]] < v[s[j]] })
		return s
	}
	o := Ordering{Real: by(real), Sim: by(sim)}
	for i, a := range arms {
		for _, b := range arms[i+1:] {
			if sign(real[a]-real[b]) != sign(sim[a]-sim[b]) {
				o.Discordant = append(o.Discordant, [2]string{a, b})
			}
		}
	}
	return o
}

func sign(x float64) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

// Side is one side's paired comparison of an arm with the baseline.
type Side struct {
	Effect   float64 `json:"effect"`   // median over seeds of (baseline - arm) / baseline: > 0 is better
	PBetter  float64 `json:"p_better"` // one-sided exact Wilcoxon signed-rank, the arm lower
	PWorse   float64 `json:"p_worse"`  // the same test, the arm higher
	Verdict  string  `json:"verdict"`  // "better", "worse" (p < stats.Alpha) or "null"
	Improved int     `json:"improved"` // seeds on which the arm is lower
	Seeds    int     `json:"seeds"`    //
}

// Effect is one arm against the baseline on one metric, real and simulated.
type Effect struct {
	Arm         string `json:"arm"`
	Metric      string `json:"metric"`
	Real        Side   `json:"real"`
	Sim         Side   `json:"sim"`
	SameSign    bool   `json:"same_sign"`
	SameVerdict bool   `json:"same_verdict"`
}

func effects(cells []Cell, baseline string) ([]Effect, error) {
	var base *Cell
	for i := range cells {
		if cells[i].Arm == baseline {
			base = &cells[i]
		}
	}
	if base == nil {
		return nil, nil // no baseline cell: nothing to pair against
	}
	var out []Effect
	for _, c := range cells {
		if c.Arm == baseline {
			continue
		}
		for _, m := range OrderedMetrics {
			br, bs := bySeed(base.Seeds, m)
			ar, as := bySeed(c.Seeds, m)
			e := Effect{Arm: c.Arm, Metric: m}
			var err error
			if e.Real, err = Paired(br, ar); err != nil {
				return nil, fmt.Errorf("replay: %s vs %s on %s (real): %w", c.Arm, baseline, m, err)
			}
			if e.Sim, err = Paired(bs, as); err != nil {
				return nil, fmt.Errorf("replay: %s vs %s on %s (simulated): %w", c.Arm, baseline, m, err)
			}
			e.SameSign = sign(e.Real.Effect) == sign(e.Sim.Effect)
			e.SameVerdict = e.Real.Verdict == e.Sim.Verdict
			out = append(out, e)
		}
	}
	return out, nil
}

// Paired compares a candidate with a baseline over the seeds both have (seed
// -> value), as every paired comparison of the bench does (stats.PairBySeed,
// stats.ComparePaired, here without an interval): the median relative
// reduction and one-sided exact Wilcoxon signed-rank tests in both
// directions. Seeds where either value is not finite or the baseline is zero
// are left out.
func Paired(baseline, candidate map[uint64]float64) (Side, error) {
	p := stats.PairBySeed(baseline, candidate)
	if len(p.Seeds) == 0 {
		return Side{Verdict: "null", PBetter: 1, PWorse: 1}, nil
	}
	c, err := stats.ComparePaired(p.Baseline, p.Candidate, stats.Bootstrap{})
	if err != nil {
		return Side{}, err
	}
	s := Side{Effect: c.Reduction, Seeds: c.Seeds, Improved: c.Improved, PBetter: c.Test.P, PWorse: c.Worse.P, Verdict: "null"}
	switch {
	case c.Significant(stats.Alpha):
		s.Verdict = "better"
	case c.SignificantlyWorse(stats.Alpha):
		s.Verdict = "worse"
	}
	return s, nil
}

// Spearman is the rank correlation of x and y (average ranks for ties),
// over the pairs where both are finite; NaN with fewer than 3 such pairs or
// when either side is constant.
func Spearman(x, y []float64) float64 {
	var a, b []float64
	for i := range x {
		if i < len(y) && stats.Finite(x[i]) && stats.Finite(y[i]) {
			a, b = append(a, x[i]), append(b, y[i])
		}
	}
	if len(a) < 3 {
		return math.NaN()
	}
	ra, rb := ranks(a), ranks(b)
	return pearson(ra, rb)
}

func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return v[idx[i]] < v[idx[j]] })
	r := make([]float64, len(v))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && v[idx[j+1]] == v[idx[i]] {
			j++
		}
		avg := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = avg
		}
		i = j + 1
	}
	return r
}

func pearson(x, y []float64) float64 {
	mx, my := stats.Mean(x), stats.Mean(y)
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}
