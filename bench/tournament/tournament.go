// Package tournament runs every routing policy (an arm) on every workload
// profile in virtual time and ranks them: per profile, one cell per arm under
// the published cell protocol (a cold fleet, the warm-up routed by the arm
// when the workload has a shared prefix pool, the seeds back to back), every
// arm an ext_proc picker behind Envoy (experiment.EnvoyRouter), the same seeds and
// so the same requests for every arm. Each seed's metrics are computed by
// bench/capture from the simulated rows and engine series, as the replay
// computes them; arms are compared by paired tests over seeds (bench/stats).
//
// Equal configs give equal results, whatever the number of workers. The
// package reads no clocks for its results and writes no files; the report
// writers take an io.Writer.
package tournament

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/replay"
	"github.com/loadaware/loadaware-epp/bench/vtime"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// Config is a tournament: which profiles, arms and seeds.
type Config struct {
	Profiles []Profile
	Arms     []experiment.Arm
	Seeds    []uint64 // the same for every profile and arm: seed i of one arm pairs with seed i of every other
	// SampleInterval is the grid on which the engines' running counts (the
	// imbalance) and cache counters (the hit rate) are sampled.
	SampleInterval time.Duration
	Workers        int // cells in parallel; 0 = GOMAXPROCS
	// Progress, if set, is called after each cell with the cells done, the
	// total, and the cell's profile and arm. Calls do not overlap.
	Progress func(done, total int, profile, arm string)
}

// DefaultSampleInterval is the sweep's sampling grid (experiment.DefaultConfig).
const DefaultSampleInterval = 250 * time.Millisecond

// MinSeeds is the fewest seeds the statistics are stated for; Run
// accepts fewer (a test slice), and the report says so.
const MinSeeds = 20

// GoodputSLO is the TTFT objective of the goodput metric, seconds.
const GoodputSLO = 0.150

// Metric keys of a seed, in report order. The capture keys are computed by
// capture.SeedMetrics (and Cell.SeedMetrics for the imbalance); GoodputKey by
// capture.Goodput; HitRateKey by Cell.SeedFacts.
const (
	GoodputKey   = "goodput_150ms"
	HitRateKey   = "hit_rate"
	InputTokSKey = "input_tok_s" // prompt tokens of the ok requests per second, over req_s's window (inputTokS)
	// ReuseKey is the share of the seed's prompt tokens the engines did not
	// compute at each request's first admission (promptReuse): comparable
	// with a trace's reuse ceiling, unlike HitRateKey, which is vLLM's
	// counters and counts every admission attempt again.
	ReuseKey = "prompt_reuse"
)

// Metrics are the per-seed metrics the tournament reports, in report order.
var Metrics = []string{capture.TTFTP50, capture.TTFTP90, capture.TTFTP95, capture.TTFTP99, capture.ITLP95, GoodputKey, capture.ReqS,
	InputTokSKey, capture.ImbalanceKey, HitRateKey, ReuseKey, capture.Errors}

// RankMetric is the metric arms are ranked and tested on.
const RankMetric = capture.TTFTP95

// Validate reports the first unusable field.
func (c Config) Validate() error {
	switch {
	case len(c.Profiles) == 0:
		return errors.New("tournament: no profiles: name at least one")
	case len(c.Arms) == 0:
		return errors.New("tournament: no arms: name at least one")
	case len(c.Seeds) == 0:
		return errors.New("tournament: no seeds: give at least one")
	case c.SampleInterval <= 0:
		return fmt.Errorf("tournament: sample interval %v: must be positive", c.SampleInterval)
	}
	seen := map[string]bool{}
	for _, p := range c.Profiles {
		if p.Name == "" || seen[p.Name] {
			return fmt.Errorf("tournament: profile name %q is empty or repeated", p.Name)
		}
		seen[p.Name] = true
		cfg := p.Fleet
		cfg.Arms, cfg.Seeds = c.Arms, c.Seeds
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("tournament: profile %s: %w", p.Name, err)
		}
		if p.Trace != nil {
			if p.Replayed {
				return fmt.Errorf("tournament: profile %s: a trace profile cannot also replay the measured seeds", p.Name)
			}
			if _, err := traceSeeds(p.Trace, c.Seeds); err != nil {
				return fmt.Errorf("tournament: profile %s: %w", p.Name, err)
			}
		}
		if p.Replayed {
			if p.Fleet.Workload.Profile != workload.ProfileShared {
				return fmt.Errorf("tournament: profile %s replays measured seeds: its workload must be the shared profile, not %q", p.Name, p.Fleet.Workload.Profile)
			}
			if _, err := measuredSeeds(c.Seeds, p.Fleet.Workload.Requests, p.Fleet.Workload.Prefixes); err != nil {
				return fmt.Errorf("tournament: profile %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// Result is a whole tournament.
type Result struct {
	Seeds          []uint64
	SampleInterval time.Duration
	Profiles       []ProfileResult
}

// ProfileResult is every arm on one profile.
type ProfileResult struct {
	Profile Profile
	Arms    []ArmResult // in Config.Arms order
}

// ArmResult is one arm on one profile: its seeds' metrics in Config.Seeds
// order.
type ArmResult struct {
	Arm   experiment.Arm
	Seeds []SeedResult
}

// SeedResult is one seed's metrics, under the keys of Metrics (NaN when
// undefined, e.g. a latency with no successful request; the imbalance is
// +Inf when an engine stayed idle).
type SeedResult struct {
	Seed    uint64
	Metrics map[string]float64
}

// Values returns the arm's per-seed values of metric, in seed order.
func (a ArmResult) Values(metric string) []float64 {
	out := make([]float64, len(a.Seeds))
	for i, s := range a.Seeds {
		out[i] = capture.Metric(s.Metrics, metric)
	}
	return out
}

// bySeed maps each of the arm's seeds to its value of metric.
func (a ArmResult) bySeed(metric string) map[uint64]float64 {
	out := make(map[uint64]float64, len(a.Seeds))
	for _, s := range a.Seeds {
		out[s.Seed] = capture.Metric(s.Metrics, metric)
	}
	return out
}

// Run runs every arm on every profile, one cell per (profile, arm),
// cfg.Workers cells at a time. It stops early with ctx's error when ctx is
// cancelled.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{Seeds: cfg.Seeds, SampleInterval: cfg.SampleInterval, Profiles: make([]ProfileResult, len(cfg.Profiles))}
	for i, p := range cfg.Profiles {
		res.Profiles[i] = ProfileResult{Profile: p, Arms: make([]ArmResult, len(cfg.Arms))}
	}
	total := len(cfg.Profiles) * len(cfg.Arms)
	var mu sync.Mutex
	done := 0
	err := vtime.ForEach(ctx, total, cfg.Workers, func(j int) error {
		p, a := j/len(cfg.Arms), j%len(cfg.Arms)
		prof, arm := cfg.Profiles[p], cfg.Arms[a]
		out, err := runCell(ctx, cfg, prof, arm)
		res.Profiles[p].Arms[a] = out
		mu.Lock()
		done++
		if cfg.Progress != nil {
			cfg.Progress(done, total, prof.Name, arm.Name)
		}
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("tournament: profile %s, arm %s: %w", prof.Name, arm.Name, err)
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// runCell runs one arm on one profile's seeds and computes each seed's
// metrics. A generated seed's requests are built when the cell reaches it,
// so a cell holds one seed's requests at a time.
func runCell(ctx context.Context, cfg Config, prof Profile, arm experiment.Arm) (ArmResult, error) {
	seeds, err := cellSeeds(prof, cfg.Seeds)
	if err != nil {
		return ArmResult{}, err
	}
	cc := vtime.CellConfig{Sweep: prof.Fleet, Arm: arm, Seeds: seeds, SampleInterval: cfg.SampleInterval, Warmup: prof.Trace == nil}
	cc.Sweep.Arms, cc.Sweep.Seeds = []experiment.Arm{arm}, cfg.Seeds
	cr, err := vtime.RunCell(ctx, cc)
	if err != nil {
		return ArmResult{}, err
	}
	return seedResults(prof.Name+"/"+arm.Name, cr)
}

// cellSeeds returns a profile's seeds: the measured ones for a replayed
// profile, else each seed's generated workload, generated when it runs.
func cellSeeds(prof Profile, seeds []uint64) ([]vtime.CellSeed, error) {
	wl := prof.Fleet.Workload
	if prof.Trace != nil {
		return traceSeeds(prof.Trace, seeds)
	}
	if prof.Replayed {
		return measuredSeeds(seeds, wl.Requests, wl.Prefixes)
	}
	pool, err := workload.NewPool(wl)
	if err != nil {
		return nil, err
	}
	out := make([]vtime.CellSeed, len(seeds))
	for i, s := range seeds {
		out[i] = vtime.CellSeed{Seed: s, Generate: func() ([]workload.Request, error) { return workload.Generate(wl, pool, s) }}
	}
	return out, nil
}

// publishedCell is the embedded capture's cell whose seeds the published
// profile replays.
const publishedCell = "kvaware"

// measuredSeeds returns the published profile's seeds: for each of seeds,
// the embedded kvaware cell's measured seed of that number, cut to its first
// requests requests (more than it has is an error). The seeds share their slices with every caller: they
// must not be modified.
func measuredSeeds(seeds []uint64, requests, prefixes int) ([]vtime.CellSeed, error) {
	all, err := publishedSeeds()
	if err != nil {
		return nil, err
	}
	byNumber := map[uint64]vtime.CellSeed{}
	for _, sd := range all {
		byNumber[sd.Seed] = sd
	}
	out := make([]vtime.CellSeed, len(seeds))
	for i, s := range seeds {
		sd, ok := byNumber[s]
		if !ok {
			return nil, fmt.Errorf("the published profile has the measured seeds %d-%d only, not seed %d: pass -seeds within them", all[0].Seed, all[len(all)-1].Seed, s)
		}
		for j, id := range sd.PrefixIDs {
			if id >= prefixes {
				return nil, fmt.Errorf("measured seed %d request %d uses prefix %d: the profile's pool has prefixes 0..%d (-prefixes)", s, j, id, prefixes-1)
			}
		}
		if requests > len(sd.PrefixIDs) {
			return nil, fmt.Errorf("measured seed %d has %d requests: -requests %d asks for more (the published profile replays at most its measured requests)", s, len(sd.PrefixIDs), requests)
		}
		sd.PrefixIDs, sd.SendAt = sd.PrefixIDs[:requests], sd.SendAt[:requests]
		out[i] = sd
	}
	return out, nil
}

// publishedSeeds decodes the embedded capture's kvaware cell once: its
// seeds in seed order, on the published pool of 128 prefixes.
var publishedSeeds = sync.OnceValues(func() ([]vtime.CellSeed, error) {
	data, err := capture.Embedded()
	if err != nil {
		return nil, err
	}
	for _, cc := range data.Cells {
		if cc.ArmLabel() == publishedCell {
			seeds, err := replay.CellSeeds(cc, workload.DefaultConfig().Prefixes)
			if err == nil && len(seeds) == 0 {
				err = fmt.Errorf("the embedded %s cell has no seeds", publishedCell)
			}
			return seeds, err
		}
	}
	return nil, fmt.Errorf("the embedded capture has no %s cell", publishedCell)
})

// seedResults computes every seed's Metrics from a cell run, with
// bench/capture's code on the cell in the measured layout.
func seedResults(name string, cr vtime.CellResult) (ArmResult, error) {
	cell, ms, facts, err := replay.SimCell(name, cr)
	if err != nil {
		return ArmResult{}, err
	}
	out := ArmResult{Arm: cr.Arm}
	for i, s := range cell.Seeds {
		m := map[string]float64{GoodputKey: capture.Goodput(s.Requests, GoodputSLO), HitRateKey: facts[i].HitRate, InputTokSKey: inputTokS(s.Requests),
			ReuseKey: promptReuse(cr.Runs[i].Rows)}
		for _, k := range Metrics {
			if v, ok := ms[i][k]; ok {
				m[k] = v
			}
		}
		out.Seeds = append(out.Seeds, SeedResult{Seed: uint64(s.Seed), Metrics: m})
	}
	return out, nil
}

// inputTokS is the prompt tokens of the ok rows per second, over the window
// capture.SeedMetrics takes req_s over (capture.PerSecond): the input
// throughput llm-d reports beside TTFT. It is NaN when that window is empty.
func inputTokS(rows []capture.Request) float64 {
	var tokens float64
	for _, r := range rows {
		if r.OK {
			tokens += float64(r.PromptTokens)
		}
	}
	return capture.PerSecond(tokens, rows)
}

// promptReuse is the share of the prompt tokens of rows that the engines did
// not compute when each request was first admitted: its GPU prefix-cache hit
// plus what LMCache loaded from the CPU tier (experiment.Row's CachedTokens
// and LoadedTokens). Each request counts once, however often it was queried
// while waiting or recomputed after a preemption. NaN with no prompt token.
func promptReuse(rows []experiment.Row) float64 {
	var prompt, reused int64
	for _, r := range rows {
		prompt += int64(r.PromptTokens)
		reused += int64(r.CachedTokens + r.LoadedTokens)
	}
	if prompt == 0 {
		return math.NaN()
	}
	return float64(reused) / float64(prompt)
}
