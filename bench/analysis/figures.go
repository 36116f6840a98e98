package analysis

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/plot"
)

// Figure is one written PNG and what it shows.
type Figure struct {
	File, Caption string
}

// Figures draws the report's figures into dir and returns them in report order.
func Figures(dir string, res experiment.Results, a Analysis) ([]Figure, error) {
	var figs []Figure
	add := func(file, caption string, err error) error {
		if errors.Is(err, plot.ErrNoData) {
			return nil // nothing finite to draw (e.g. an idle engine made the imbalance +Inf): no figure
		}
		if err != nil {
			return fmt.Errorf("analysis: figure %s: %w", file, err)
		}
		figs = append(figs, Figure{File: file, Caption: caption})
		return nil
	}

	// 1. TTFT ECDF per arm, every request of every seed.
	var ecdf []plot.Series
	for _, s := range a.Arms {
		var ys []float64
		for _, run := range res.Runs {
			if run.Arm.Name != s.Arm.Name {
				continue
			}
			for _, r := range run.Rows {
				if r.Status == "ok" {
					ys = append(ys, r.TTFT)
				}
			}
		}
		ecdf = append(ecdf, plot.Series{Name: s.Arm.Name, Y: ys})
	}
	if err := add("ttft_ecdf.png", "TTFT distribution per arm (every request of every seed; log scale).",
		plot.ECDF(filepath.Join(dir, "ttft_ecdf.png"), plot.Axes{Title: "Time to first token", X: "TTFT (s)", Y: "fraction of requests", LogX: true}, ecdf)); err != nil {
		return nil, err
	}

	// 2-3. TTFT p95 and imbalance against beta, with kvaware and the published values.
	for _, m := range []struct{ metric, file, title string }{
		{"TTFT p95", "ttft_p95_vs_beta.png", "TTFT p95 (s)"},
		{"imbalance", "imbalance_vs_beta.png", "load imbalance (busiest / idlest)"},
	} {
		series := betaSeries(a, m.metric)
		if len(series) == 0 {
			continue
		}
		if err := add(m.file, fmt.Sprintf("%s of loadaware against beta (median over seeds), kvaware as a flat reference; dashed: published.", m.title),
			plot.Lines(filepath.Join(dir, m.file), plot.Axes{Title: m.title + " vs beta", X: "beta", Y: m.title}, series)); err != nil {
			return nil, err
		}
	}

	// 4. Busiest vs idlest engine over time, first seed, kvaware and loadaware beta 1.
	var steps []plot.Series
	for _, name := range []string{Baseline, "loadaware-b1"} {
		for _, run := range res.Runs {
			if run.Arm.Name != name || run.Seed != res.Config.Seeds[0] || len(run.Running) == 0 {
				continue
			}
			means, _ := imbalance(run.Running)
			busy, idle := 0, 0
			for e := range means {
				if means[e] > means[busy] {
					busy = e
				}
				if means[e] < means[idle] {
					idle = e
				}
			}
			for _, e := range []struct {
				idx   int
				label string
			}{{busy, "busiest"}, {idle, "idlest"}} {
				s := plot.Series{Name: fmt.Sprintf("%s %s", name, e.label), Dashed: e.idx == idle}
				for i, row := range run.Running {
					s.X = append(s.X, float64(i)*run.Interval.Seconds())
					s.Y = append(s.Y, float64(row[e.idx]))
				}
				steps = append(steps, s)
			}
		}
	}
	if len(steps) > 0 {
		if err := add("inflight_over_time.png", fmt.Sprintf("Running requests on the busiest and the idlest engine over the send window (seed %d).", res.Config.Seeds[0]),
			plot.Steps(filepath.Join(dir, "inflight_over_time.png"), plot.Axes{Title: "Running requests per engine", X: "time since first send (s)", Y: "running requests"}, steps)); err != nil {
			return nil, err
		}
	}

	// 5. Goodput against the TTFT objective.
	var good []plot.Series
	for _, s := range a.Arms {
		good = append(good, plot.Series{Name: s.Arm.Name, X: Objectives(), Y: s.Goodput})
	}
	if err := add("goodput.png", "Goodput: fraction of requests whose TTFT meets the objective (median over seeds).",
		plot.Lines(filepath.Join(dir, "goodput.png"), plot.Axes{Title: "Goodput vs TTFT objective", X: "TTFT objective (ms)", Y: "fraction meeting it", YMin: 0, YMax: 1}, good)); err != nil {
		return nil, err
	}

	// 6-7. Paired seeds: each loadaware arm against kvaware.
	for _, m := range []struct{ metric, file string }{{"imbalance", "paired_imbalance.png"}, {"TTFT p95", "paired_ttft_p95.png"}} {
		met, _ := MetricByName(m.metric)
		var series []plot.Series
		base := seedValues(a, Baseline, met)
		if len(base) == 0 {
			continue
		}
		for _, s := range a.Arms {
			if !strings.HasPrefix(s.Arm.Name, "loadaware") {
				continue
			}
			cand := seedValues(a, s.Arm.Name, met)
			ps := plot.Series{Name: s.Arm.Name}
			for _, seed := range slices.Sorted(maps.Keys(cand)) { // sorted: the PNG must be repeatable
				if b, ok := base[seed]; ok {
					ps.X, ps.Y = append(ps.X, b), append(ps.Y, cand[seed])
				}
			}
			if len(ps.X) > 0 {
				series = append(series, ps)
			}
		}
		if len(series) == 0 {
			continue
		}
		if err := add(m.file, fmt.Sprintf("Paired seeds: %s of each loadaware arm (y) against kvaware on the same seed (x); below the diagonal = better.", m.metric),
			plot.Paired(filepath.Join(dir, m.file), plot.Axes{Title: "Paired seeds: " + m.metric, X: Baseline + " " + m.metric, Y: "loadaware " + m.metric}, series)); err != nil {
			return nil, err
		}
	}
	return figs, nil
}

// betaSeries returns the simulated loadaware curve over beta, kvaware as a
// flat line over the same range, and the published counterparts.
func betaSeries(a Analysis, metric string) []plot.Series {
	type pt struct{ beta, sim, pub float64 }
	var pts []pt
	var hasPub bool
	for _, s := range a.Arms {
		if s.Arm.Policy != "loadaware" {
			continue
		}
		p := pt{beta: s.Arm.Beta, sim: s.Median[metric]}
		if pr, ok := PublishedFor(s.Arm.Name); ok {
			p.pub, _ = pr.value(metric)
			hasPub = true
		}
		pts = append(pts, p)
	}
	if len(pts) == 0 {
		return nil
	}
	slices.SortFunc(pts, func(x, y pt) int {
		return cmp.Compare(x.beta, y.beta)
	})
	lo, hi := pts[0].beta, pts[len(pts)-1].beta
	sim := plot.Series{Name: "loadaware (simulated)"}
	pub := plot.Series{Name: "loadaware (published)"}
	for _, p := range pts {
		sim.X, sim.Y = append(sim.X, p.beta), append(sim.Y, p.sim)
		if p.pub != 0 {
			pub.X, pub.Y = append(pub.X, p.beta), append(pub.Y, p.pub)
		}
	}
	out := []plot.Series{sim}
	if b, ok := a.Arm(Baseline); ok {
		out = append(out, plot.Series{Name: "kvaware (simulated)", X: []float64{lo, hi}, Y: []float64{b.Median[metric], b.Median[metric]}})
	}
	if hasPub && len(pub.X) > 0 {
		pub.Dashed = true
		out = append(out, pub)
		if p, ok := PublishedFor(Baseline); ok {
			v, _ := p.value(metric)
			out = append(out, plot.Series{Name: "kvaware (published)", X: []float64{lo, hi}, Y: []float64{v, v}, Dashed: true})
		}
	}
	return out
}

func seedValues(a Analysis, arm string, met Metric) map[uint64]float64 {
	out := map[uint64]float64{}
	for _, s := range a.Seeds {
		if s.Arm == arm {
			out[s.Seed] = met.Value(s)
		}
	}
	return out
}
