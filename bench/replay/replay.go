// Package replay replays measured cells (a directory in the published layout,
// or the embedded gen2 sweep) through the shipped picker on the simulated
// fleet in virtual time, each cell with its real protocol: a cold fleet, the
// warm-up routed by the cell's own policy, then every seed back to back with
// the seed's real prefix sequence and send offsets. Every metric is computed
// by bench/capture from the real rows and series and from the simulated ones
// alike, and the two are compared: per arm with a tolerance verdict, the
// ordering of the arms, the paired effects against the baseline, and the
// per-seed rank correlation.
//
// Equal inputs give equal reports (the simulation is deterministic and runs
// one cell per worker).
package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/stats"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

// Options configure a replay.
type Options struct {
	Fleet    experiment.Config // engine model, engines, per-engine factors, workload pool, hash seed, router, seed gap
	Scrape   time.Duration     // how often the engines are sampled (the published Prometheus step)
	Baseline string            // arm label the paired effects are computed against ("kvaware")
	Workers  int               // cells in parallel; 0 = GOMAXPROCS
	// Progress, if set, is called after each cell with the cells done and
	// the total.
	Progress func(done, total int, cell string)
}

// DefaultOptions replays on the calibrated model of the published fleet
// (experiment.DefaultConfig) behind the published Python router.
func DefaultOptions() Options {
	return Options{
		Fleet:    experiment.DefaultConfig(),
		Scrape:   experiment.DefaultScrapeInterval,
		Baseline: "kvaware",
	}
}

// Metrics compared per seed, in report order.
var Metrics = []string{capture.TTFTP50, capture.TTFTP95, capture.TTFTP99, capture.ITLP50, capture.ITLP95, capture.ITLP99,
	capture.ITLStall, capture.E2EP95, capture.ReqS, capture.Errors, capture.ImbalanceKey}

// Tolerances are the relative tolerances of the per-arm verdicts (medians over
// seeds): the simulator-fidelity targets. Metrics without one are reported
// without a verdict.
var Tolerances = map[string]float64{
	capture.TTFTP95: 0.15, capture.ReqS: 0.15, capture.ImbalanceKey: 0.15,
	capture.TTFTP50: 0.25, capture.TTFTP99: 0.25, capture.ITLP95: 0.25, capture.E2EP95: 0.25,
}

// HitRateTolerance is the absolute tolerance on a cell's prefix-cache hit rate.
const HitRateTolerance = 0.02

// Pair is one quantity measured on the real cluster and simulated.
type Pair struct {
	Real float64 `json:"real"`
	Sim  float64 `json:"sim"`
}

// SeedPair is one seed's metrics, real and simulated, and its engine facts over
// the seed's send window (per-engine lists busiest engine first, as Cell.Facts).
type SeedPair struct {
	Seed      int                  `json:"seed"`
	Real      map[string]float64   `json:"real"`
	Sim       map[string]float64   `json:"sim"`
	RealFacts map[string][]float64 `json:"real_facts,omitempty"`
	SimFacts  map[string][]float64 `json:"sim_facts,omitempty"`
}

// Verdict is one metric's median over seeds against its tolerance.
type Verdict struct {
	Metric    string  `json:"metric"`
	Real      float64 `json:"real"`
	Sim       float64 `json:"sim"`
	RelErr    float64 `json:"rel_err"`             // sim/real - 1 (absolute difference for the hit rate)
	Tolerance float64 `json:"tolerance,omitempty"` // 0: reported only
	OK        bool    `json:"ok"`
}

// Cell is one replayed cell.
type Cell struct {
	Cell     string              `json:"cell"`
	Arm      string              `json:"arm"`
	HitRate  Pair                `json:"hit_rate"`
	Seeds    []SeedPair          `json:"seeds"`
	Medians  map[string]Pair     `json:"medians"`
	Verdicts []Verdict           `json:"verdicts"`
	RankCorr map[string]float64  `json:"rank_corr"` // Spearman's rho of real vs simulated per-seed values
	Facts    map[string]FactPair `json:"facts"`
	Elapsed  float64             `json:"elapsed_s"` // wall time of this cell's simulation
}

// FactPair is one engine-side fact, real and simulated. Per-engine facts
// list the engines busiest first (by request share), so engines pair by role.
type FactPair struct {
	Real []float64 `json:"real"`
	Sim  []float64 `json:"sim"`
}

// Report is a whole replay.
type Report struct {
	Source   string              `json:"source,omitempty"`
	Baseline string              `json:"baseline"`
	Cells    []Cell              `json:"cells"`
	Ordering map[string]Ordering `json:"ordering"`
	Effects  []Effect            `json:"effects"`
	Elapsed  float64             `json:"elapsed_s"`
}

// Run replays every cell of c.
func Run(ctx context.Context, c capture.Compact, opt Options) (Report, error) {
	start := time.Now()
	if len(c.Cells) == 0 {
		return Report{}, errors.New("replay: no cells to replay")
	}
	if opt.Scrape <= 0 {
		return Report{}, fmt.Errorf("replay: scrape interval %v: must be positive", opt.Scrape)
	}
	cfgs := make([]vtime.CellConfig, len(c.Cells))
	for i, cc := range c.Cells {
		cfg, err := cellConfig(cc, opt)
		if err != nil {
			return Report{}, err
		}
		cfgs[i] = cfg
	}
	cells := make([]Cell, len(c.Cells))
	var mu sync.Mutex
	done := 0
	err := vtime.ForEach(ctx, len(c.Cells), opt.Workers, func(i int) error {
		t := time.Now()
		res, err := vtime.RunCell(ctx, cfgs[i])
		if err == nil {
			cells[i], err = compareCell(c.Cells[i], res)
			cells[i].Elapsed = time.Since(t).Seconds()
		}
		mu.Lock()
		done++
		if opt.Progress != nil {
			opt.Progress(done, len(c.Cells), c.Cells[i].Name)
		}
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("replay: cell %s: %w", c.Cells[i].Name, err)
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	rep := Report{Source: c.Source, Baseline: opt.Baseline, Cells: cells}
	rep.Ordering = orderings(cells)
	if rep.Effects, err = effects(cells, opt.Baseline); err != nil {
		return Report{}, err
	}
	rep.Elapsed = time.Since(start).Seconds()
	return rep, nil
}

// cellConfig turns a measured cell into the simulated cell that replays it.
func cellConfig(cc capture.CompactCell, opt Options) (vtime.CellConfig, error) {
	arm := experiment.Arm{Name: cc.ArmLabel(), Policy: cc.Arm}
	if cc.Beta != nil {
		arm.Beta = *cc.Beta
	}
	cfg := vtime.CellConfig{Sweep: opt.Fleet, Arm: arm, SampleInterval: opt.Scrape, Warmup: true}
	seeds, err := CellSeeds(cc, opt.Fleet.Workload.Prefixes)
	if err != nil {
		return cfg, err
	}
	cfg.Seeds = seeds
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("replay: cell %s (arm %s): %w", cc.Name, arm.Name, err)
	}
	return cfg, nil
}

// CellSeeds returns a measured cell's seeds as the simulated cell replays
// them: per seed its prefix sequence and send offsets from its first send,
// rounded to the nanosecond. Every prefix id must lie in a pool of prefixes
// prefixes and the rows must be in send order.
func CellSeeds(cc capture.CompactCell, prefixes int) ([]vtime.CellSeed, error) {
	var out []vtime.CellSeed
	for _, s := range cc.Seeds {
		if len(s.PrefixID) == 0 {
			return nil, fmt.Errorf("replay: cell %s seed %d has no requests", cc.Name, s.Seed)
		}
		sd := vtime.CellSeed{Seed: uint64(s.Seed), PrefixIDs: s.PrefixID, SendAt: make([]time.Duration, len(s.Send))}
		for i, t := range s.Send {
			if s.PrefixID[i] < 0 || s.PrefixID[i] >= prefixes {
				return nil, fmt.Errorf("replay: cell %s seed %d request %d uses prefix %d: the simulated pool has prefixes 0..%d (-prefixes)", cc.Name, s.Seed, i, s.PrefixID[i], prefixes-1)
			}
			off := t - s.Send[0]
			if i > 0 && t < s.Send[i-1] {
				return nil, fmt.Errorf("replay: cell %s seed %d request %d is sent before request %d: rows must be in send order", cc.Name, s.Seed, i, i-1)
			}
			sd.SendAt[i] = time.Duration(math.Round(off * 1e9))
		}
		out = append(out, sd)
	}
	return out, nil
}

// SimCell turns a simulated cell into the measured layout (client rows and
// engine series), so bench/capture computes its metrics with the very code
// that computes the real ones, and returns it with those per-seed metrics
// (Cell.SeedMetrics) and engine facts (Cell.SeedFacts). The cell is called
// name, its arm is the policy, and its times are seconds from the first
// seed's first send; res must come from vtime.RunCell.
func SimCell(name string, res vtime.CellResult) (capture.Cell, []map[string]float64, []capture.Facts, error) {
	c := simCell(name, res)
	ms, err := c.SeedMetrics()
	if err != nil {
		return c, nil, nil, err
	}
	facts, err := c.SeedFacts()
	return c, ms, facts, err
}

func simCell(name string, res vtime.CellResult) capture.Cell {
	c := capture.Cell{Name: name, Arm: res.Arm.Policy, Prom: map[string][]capture.Series{}}
	for k, run := range res.Runs {
		base := res.SeedStart[k].Seconds() - run.Rows[0].SendAt
		sd := capture.Seed{Seed: int(run.Seed)}
		for _, r := range run.Rows {
			q := capture.Request{Index: r.Index, PrefixID: r.PrefixID, Send: base + r.SendAt, OK: r.Status == "ok", Error: r.Error,
				PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens}
			if q.OK {
				q.TTFT, q.E2E, q.ITLs = r.TTFT, r.E2E, r.ITLs
			}
			sd.Requests = append(sd.Requests, q)
		}
		c.Seeds = append(c.Seeds, sd)
	}
	add := func(metric string, v func(s experiment.Sample, e int) float64) {
		for e, addr := range res.Addrs {
			s := capture.Series{Instance: addr}
			for _, x := range res.Samples {
				s.T = append(s.T, x.At.Seconds())
				s.V = append(s.V, v(x, e))
			}
			c.Prom[metric] = append(c.Prom[metric], s)
		}
	}
	add(capture.RunningMetric, func(s experiment.Sample, e int) float64 { return float64(s.Running[e]) })
	add(capture.WaitingMetric, func(s experiment.Sample, e int) float64 { return float64(s.Waiting[e]) })
	add(capture.KVUsageMetric, func(s experiment.Sample, e int) float64 { return s.KVUsage[e] })
	add(capture.PreemptionsMetric, func(s experiment.Sample, e int) float64 { return float64(s.Preemptions[e]) })
	add(capture.HitsMetric, func(s experiment.Sample, e int) float64 { return float64(s.Hits[e]) })
	add(capture.QueriesMetric, func(s experiment.Sample, e int) float64 { return float64(s.Queries[e]) })
	add(capture.CPUTierMetric, func(s experiment.Sample, e int) float64 { return float64(s.CPUBytes[e]) })
	add(capture.TTFTCountMetric, func(s experiment.Sample, e int) float64 { return float64(s.FirstTokens[e]) })
	add(capture.TTFTSumMetric, func(s experiment.Sample, e int) float64 { return s.TTFTSum[e] })
	add(capture.PrefillCountMetric, func(s experiment.Sample, e int) float64 { return float64(s.FirstTokens[e]) })
	add(capture.PrefillSumMetric, func(s experiment.Sample, e int) float64 { return s.PrefillSum[e] })
	return c
}

// compareCell computes the simulated cell's metrics and sets them beside the
// measured ones.
func compareCell(cc capture.CompactCell, res vtime.CellResult) (Cell, error) {
	sc, simSeeds, simSeedFacts, err := SimCell(cc.Name, res)
	if err != nil {
		return Cell{}, err
	}
	simFacts, err := sc.Facts()
	if err != nil {
		return Cell{}, err
	}
	if len(cc.SeedMetrics) != len(cc.Seeds) {
		return Cell{}, fmt.Errorf("replay: cell %s has metrics for %d of its %d seeds: rebuild it with capture.BuildCompact", cc.Name, len(cc.SeedMetrics), len(cc.Seeds))
	}
	out := Cell{Cell: cc.Name, Arm: cc.ArmLabel(), HitRate: Pair{cc.Facts.HitRate, simFacts.HitRate},
		Medians: map[string]Pair{}, RankCorr: map[string]float64{}}
	realSeedFacts, err := cc.Cell().SeedFacts()
	if err != nil {
		return Cell{}, err
	}
	ro, so := busiestFirst(cc.Facts.RequestShare), busiestFirst(simFacts.RequestShare)
	for i, s := range cc.Seeds {
		out.Seeds = append(out.Seeds, SeedPair{Seed: s.Seed, Real: pick(cc.SeedMetrics[i]), Sim: pick(simSeeds[i]),
			RealFacts: factLists(realSeedFacts[i], ro), SimFacts: factLists(simSeedFacts[i], so)})
	}
	for _, m := range Metrics {
		real, sim := column(out.Seeds, m)
		out.Medians[m] = Pair{stats.MedianSkippingNaN(real), stats.MedianSkippingNaN(sim)}
		out.RankCorr[m] = Spearman(real, sim)
		if tol, ok := Tolerances[m]; ok {
			out.Verdicts = append(out.Verdicts, relVerdict(m, out.Medians[m], tol))
		}
	}
	hv := Verdict{Metric: "hit_rate", Real: out.HitRate.Real, Sim: out.HitRate.Sim, RelErr: out.HitRate.Sim - out.HitRate.Real, Tolerance: HitRateTolerance}
	hv.OK = math.Abs(hv.RelErr) <= HitRateTolerance
	out.Verdicts = append(out.Verdicts, hv)
	out.Facts = factPairs(cc.Facts, simFacts)
	return out, nil
}

func pick(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(Metrics))
	for _, k := range Metrics {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

func column(seeds []SeedPair, m string) (real, sim []float64) {
	for _, s := range seeds {
		real = append(real, capture.Metric(s.Real, m))
		sim = append(sim, capture.Metric(s.Sim, m))
	}
	return real, sim
}

// bySeed maps each seed to its real and its simulated value of m.
func bySeed(seeds []SeedPair, m string) (real, sim map[uint64]float64) {
	real, sim = make(map[uint64]float64, len(seeds)), make(map[uint64]float64, len(seeds))
	for _, s := range seeds {
		real[uint64(s.Seed)], sim[uint64(s.Seed)] = capture.Metric(s.Real, m), capture.Metric(s.Sim, m)
	}
	return real, sim
}

func relVerdict(m string, p Pair, tol float64) Verdict {
	v := Verdict{Metric: m, Real: p.Real, Sim: p.Sim, Tolerance: tol, RelErr: p.Sim/p.Real - 1}
	v.OK = !math.IsNaN(v.RelErr) && math.Abs(v.RelErr) <= tol
	return v
}

// factPairs lists the engine-side facts, per-engine ones busiest engine
// first on both sides.
func factPairs(real, sim capture.Facts) map[string]FactPair {
	ro, so := busiestFirst(real.RequestShare), busiestFirst(sim.RequestShare)
	per := func(r, s []float64) FactPair { return FactPair{Real: order(r, ro), Sim: order(s, so)} }
	one := func(r, s float64) FactPair { return FactPair{Real: []float64{r}, Sim: []float64{s}} }
	return map[string]FactPair{
		"request_share":    per(real.RequestShare, sim.RequestShare),
		"waiting_share":    one(real.WaitingShare, sim.WaitingShare),
		"preemptions":      per(real.Preemptions, sim.Preemptions),
		"kv_usage_max":     per(real.KVUsageMax, sim.KVUsageMax),
		"cpu_tier_bytes":   per(real.CPUTierBytes, sim.CPUTierBytes),
		"engine_ttft_mean": per(real.EngineTTFTMean, sim.EngineTTFTMean),
		"prefill_mean":     per(real.PrefillMean, sim.PrefillMean),
	}
}

// factLists is one seed's engine facts, per-engine lists in the order idx.
func factLists(f capture.Facts, idx []int) map[string][]float64 {
	return map[string][]float64{
		"request_share":    order(f.RequestShare, idx),
		"waiting_share":    {f.WaitingShare},
		"preemptions":      order(f.Preemptions, idx),
		"kv_usage_max":     order(f.KVUsageMax, idx),
		"cpu_tier_bytes":   order(f.CPUTierBytes, idx),
		"engine_ttft_mean": order(f.EngineTTFTMean, idx),
	}
}

// busiestFirst lists the engines by request share, largest first; ties, and
// the all-NaN shares of a window without requests, keep engine order.
func busiestFirst(share []float64) []int {
	idx := make([]int, len(share))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(share[b], share[a]) })
	return idx
}

func order(v []float64, idx []int) []float64 {
	if len(v) != len(idx) {
		return v
	}
	out := make([]float64, len(v))
	for i, j := range idx {
		out[i] = v[j]
	}
	return out
}
