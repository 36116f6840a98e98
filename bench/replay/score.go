package replay

import (
	"math"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// Score is how far a replay is from the real cells, for a search over the
// model's fitted constants: one number over every cell and target, and the
// counts the fidelity targets are stated in.
type Score struct {
	Loss           float64 `json:"loss"`
	Failed         int     `json:"failed"`          // tolerance checks outside (Verdicts)
	Discordant     int     `json:"discordant"`      // pairs of arms in the opposite order, over OrderedMetrics
	EffectMismatch int     `json:"effect_mismatch"` // paired effects whose sign or verdict differs (each counts)
}

// Score weighs the replay: per cell, (log(sim/real)/tolerance)^2 for every
// verdict metric, ((sim-real)/HitRateTolerance)^2 for the hit rate, each
// engine's mean engine-side TTFT at 20%, the share of ITL gaps over 80 ms at
// 25% and the busiest engine's request share at 0.05; plus 2 for each
// discordant pair and each effect mismatch. Non-finite terms count as 100.
func (r Report) Score() Score {
	var s Score
	add := func(x float64) {
		if !stats.Finite(x) {
			x = 10
		}
		s.Loss += x * x
	}
	logRatio := func(sim, real, tol float64) float64 { return math.Log(sim/real) / tol }
	for _, c := range r.Cells {
		for _, v := range c.Verdicts {
			if !v.OK {
				s.Failed++
			}
			if v.Metric == "hit_rate" {
				add(v.RelErr / v.Tolerance)
				continue
			}
			add(logRatio(v.Sim, v.Real, v.Tolerance))
		}
		if f, ok := c.Facts["engine_ttft_mean"]; ok && len(f.Real) == len(f.Sim) {
			for i := range f.Real {
				add(logRatio(f.Sim[i], f.Real[i], 0.2))
			}
		}
		if st, ok := c.Medians[capture.ITLStall]; ok {
			add(logRatio(st.Sim, st.Real, 0.25))
		}
		if f, ok := c.Facts["request_share"]; ok && len(f.Real) > 0 && len(f.Sim) > 0 {
			add((f.Sim[0] - f.Real[0]) / 0.05)
		}
	}
	for _, o := range r.Ordering {
		s.Discordant += len(o.Discordant)
	}
	for _, e := range r.Effects {
		if !e.SameSign {
			s.EffectMismatch++
		}
		if !e.SameVerdict {
			s.EffectMismatch++
		}
	}
	s.Loss += 2 * float64(s.Discordant+s.EffectMismatch)
	return s
}
