package tournament

import (
	"math"
	"slices"

	"github.com/loadaware/loadaware-epp/bench/stats"
)

// The verdicts of a paired test (at stats.Alpha; the interval is drawn with
// stats.DefaultBootstrap, so reports repeat exactly).
const (
	VerdictBetter   = "better"
	VerdictWorse    = "worse"
	VerdictTied     = "tied"
	VerdictUntested = "untested"
)

// Median returns the median over seeds of the arm's metric, ignoring NaN
// seeds (NaN when every seed is NaN). +Inf counts as a value.
func (a ArmResult) Median(metric string) float64 { return stats.MedianSkippingNaN(a.Values(metric)) }

// Ranking returns the indexes of the profile's arms from best to worst by
// median RankMetric (lower is better); NaN medians rank last and ties keep
// Config.Arms order.
func (p ProfileResult) Ranking() []int {
	idx := make([]int, len(p.Arms))
	med := make([]float64, len(p.Arms))
	for i := range idx {
		idx[i], med[i] = i, p.Arms[i].Median(RankMetric)
	}
	slices.SortStableFunc(idx, func(a, b int) int { return compareLow(med[a], med[b]) })
	return idx
}

// compareLow orders x before y when x is lower, NaN last.
func compareLow(x, y float64) int {
	switch {
	case math.IsNaN(x) && math.IsNaN(y):
		return 0
	case math.IsNaN(x):
		return 1
	case math.IsNaN(y):
		return -1
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// Best returns the index of the profile's best arm (lowest median RankMetric).
func (p ProfileResult) Best() int { return p.Ranking()[0] }

// Test is one arm's paired comparison on RankMetric with the best other arm
// of its profile (for the best arm: the runner-up).
type Test struct {
	Arm, Against string
	Seeds        int     // paired seeds with a finite value on both sides
	Improved     int     // seeds where Arm is strictly lower
	Reduction    float64 // median relative reduction (against - arm)/against: > 0 when Arm is lower
	CILo, CIHi   float64 // its bootstrap interval (stats.DefaultBootstrap)
	PBetter      float64 // one-sided exact Wilcoxon p: Arm lower than Against
	PWorse       float64 // one-sided exact Wilcoxon p: Arm higher than Against
	Verdict      string  // VerdictBetter, VerdictWorse (p < stats.Alpha), VerdictTied, or VerdictUntested
	Note         string  // why a test is untested
}

// Tests compares every arm with the best other arm of the profile, in
// Config.Arms order. With one arm there is nothing to compare and it
// returns nil.
func (p ProfileResult) Tests() []Test {
	if len(p.Arms) < 2 {
		return nil
	}
	rank := p.Ranking()
	out := make([]Test, len(p.Arms))
	for i, a := range p.Arms {
		other := rank[0]
		if other == i {
			other = rank[1]
		}
		out[i] = pairedTest(a, p.Arms[other])
	}
	return out
}

// pairedTest compares arm with against seed by seed on RankMetric, over the
// seeds where both are finite and against is not zero (stats.PairBySeed,
// stats.ComparePaired).
func pairedTest(arm, against ArmResult) Test {
	t := Test{Arm: arm.Arm.Name, Against: against.Arm.Name, Verdict: VerdictUntested,
		Reduction: math.NaN(), CILo: math.NaN(), CIHi: math.NaN(), PBetter: math.NaN(), PWorse: math.NaN()}
	p := stats.PairBySeed(against.bySeed(RankMetric), arm.bySeed(RankMetric))
	t.Seeds = len(p.Seeds)
	if t.Seeds < 2 {
		t.Note = "fewer than 2 seeds with a finite value on both sides"
		return t
	}
	c, err := stats.ComparePaired(p.Baseline, p.Candidate, stats.DefaultBootstrap)
	if err != nil {
		t.Note = err.Error()
		return t
	}
	t.Improved, t.Reduction, t.CILo, t.CIHi, t.PBetter, t.PWorse = c.Improved, c.Reduction, c.CI.Lo, c.CI.Hi, c.Test.P, c.Worse.P
	switch {
	case c.Significant(stats.Alpha):
		t.Verdict = VerdictBetter
	case c.SignificantlyWorse(stats.Alpha):
		t.Verdict = VerdictWorse
	default:
		t.Verdict = VerdictTied
	}
	return t
}

// Relative returns each arm's median RankMetric over the profile's best
// arm's (1 for the best; NaN when either is undefined), in Config.Arms order.
func (p ProfileResult) Relative() []float64 {
	best := p.Arms[p.Best()].Median(RankMetric)
	out := make([]float64, len(p.Arms))
	for i, a := range p.Arms {
		out[i] = a.Median(RankMetric) / best
		if !stats.Finite(out[i]) {
			out[i] = math.NaN()
		}
	}
	return out
}
