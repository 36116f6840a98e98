package vtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/workload"
	"github.com/loadaware/loadaware-epp/picker"
)

// CellSeed is one seed of a cell: either its requests' prefixes and send
// offsets from the seed's first send (a measured seed's `prefix_id` column
// and send times, or a generated seed's), replayed on the workload's pool by
// workload.Replay, or the requests themselves (any workload, in send order,
// SendAt from the seed's start): Requests, or, when Requests is nil and
// Generate is set, what Generate returns when the cell reaches the seed (so
// a cell holds one seed's requests at a time). With either, PrefixIDs and
// SendAt are ignored.
type CellSeed struct {
	Seed      uint64
	PrefixIDs []int
	SendAt    []time.Duration
	Requests  []workload.Request
	Generate  func() ([]workload.Request, error)
}

// explicit reports whether the seed gives its requests rather than a replay.
func (sd CellSeed) explicit() bool { return sd.Requests != nil || sd.Generate != nil }

// requests returns the seed's requests: Requests, Generate's, or the replay
// of PrefixIDs and SendAt on pool.
func (sd CellSeed) requests(cfg workload.Config, pool *workload.Pool) ([]workload.Request, error) {
	switch {
	case sd.Requests != nil:
		return sd.Requests, nil
	case sd.Generate != nil:
		reqs, err := sd.Generate()
		if err == nil {
			err = checkSendOrder(reqs)
		}
		return reqs, err
	}
	return workload.Replay(cfg, pool, sd.Seed, sd.PrefixIDs, sd.SendAt)
}

// CellConfig is one cell of the published protocol.
type CellConfig struct {
	Sweep          experiment.Config // fleet, engine model, router, workload pool, hash seed, SeedGap (Arms, Seeds, Protocol, Warmup unused)
	Arm            experiment.Arm    //
	Seeds          []CellSeed        // measured seeds, in the order they run
	SampleInterval time.Duration     // the engines' metrics are sampled on this grid from the first seed's first send
	Warmup         bool              // run the published warm-up (2 passes, prefix order, 4 at a time) on the cold fleet first
}

// CellResult is a cell run: one Run per seed and the engines' samples over
// the whole cell.
type CellResult struct {
	Arm       experiment.Arm
	Addrs     []string
	Runs      []experiment.Run
	SeedStart []time.Duration // each seed's first send, from the first seed's first send
	Samples   []experiment.Sample
	Start     experiment.Sample // the engines right after the warm-up
	End       experiment.Sample // the engines after the last seed
}

// Validate reports the first unusable field.
func (c CellConfig) Validate() error {
	s := c.Sweep
	s.Arms, s.Seeds, s.Warmup = []experiment.Arm{c.Arm}, []uint64{1}, 0
	if err := s.Validate(); err != nil {
		return err
	}
	switch {
	case len(c.Seeds) == 0:
		return errors.New("vtime: cell has no seeds: give at least one")
	case c.SampleInterval <= 0:
		return fmt.Errorf("vtime: sample interval %v: must be positive", c.SampleInterval)
	}
	for i, sd := range c.Seeds {
		if sd.explicit() {
			if sd.Requests != nil {
				if err := checkSendOrder(sd.Requests); err != nil {
					return fmt.Errorf("vtime: cell seed %d (#%d): %w", sd.Seed, i, err)
				}
			}
			continue
		}
		if len(sd.PrefixIDs) == 0 || len(sd.PrefixIDs) != len(sd.SendAt) {
			return fmt.Errorf("vtime: cell seed %d (#%d): %d prefix ids and %d send times: need the same number, at least one", sd.Seed, i, len(sd.PrefixIDs), len(sd.SendAt))
		}
	}
	return nil
}

// checkSendOrder reports a request list that is empty or not in send order.
func checkSendOrder(reqs []workload.Request) error {
	if len(reqs) == 0 {
		return errors.New("no requests: give at least one")
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].SendAt < reqs[i-1].SendAt {
			return fmt.Errorf("request %d is sent at %v, before request %d (%v): send times must not decrease", i, reqs[i].SendAt, i-1, reqs[i-1].SendAt)
		}
	}
	return nil
}

// RunCell runs one cell as the published protocol did: a cold fleet, the
// warm-up routed by the cell's own policy (when the workload has a shared
// prefix pool), then every seed back to back on the same engines, each seed
// starting Sweep.SeedGap after the previous one's last completion. Equal
// configs give equal results.
func RunCell(ctx context.Context, cfg CellConfig) (CellResult, error) {
	if err := cfg.Validate(); err != nil {
		return CellResult{}, err
	}
	pool, err := workload.NewPool(cfg.Sweep.Workload)
	if err != nil {
		return CellResult{}, err
	}
	hasher, err := hasherFor(cfg.Sweep)
	if err != nil {
		return CellResult{}, err
	}
	w := &world{cfg: cfg.Sweep, addrs: experiment.Addrs(cfg.Sweep.Engines), hasher: hasher, router: cfg.Sweep.Router}
	var seed uint64
	if len(cfg.Seeds) > 0 {
		seed = cfg.Seeds[0].Seed
	}
	if err := w.build(cfg.Arm, seed); err != nil {
		return CellResult{}, err
	}
	defer w.close()
	if cfg.Warmup {
		if err := w.publishedWarmup(ctx, pool); err != nil {
			return CellResult{}, err
		}
	}
	res := CellResult{Arm: cfg.Arm, Addrs: w.addrs, Start: w.sample(0)}
	origin := w.now
	w.grid = &grid{origin: origin, every: cfg.SampleInterval, next: origin}
	for _, sd := range cfg.Seeds {
		reqs, err := sd.requests(cfg.Sweep.Workload, pool)
		if err != nil {
			return CellResult{}, fmt.Errorf("vtime: cell seed %d: %w", sd.Seed, err)
		}
		res.SeedStart = append(res.SeedStart, w.now-origin)
		for w.grid.next < w.now { // idle between seeds: nothing changed since the last event
			w.grid.samples = append(w.grid.samples, w.sample(w.grid.next-origin))
			w.grid.next += w.grid.every
		}
		w.push(event{at: w.grid.next, kind: evGrid})
		run, err := w.measure(ctx, cfg.Arm, sd.Seed, reqs)
		if err != nil {
			return CellResult{}, err
		}
		res.Runs = append(res.Runs, run)
		w.pause(cfg.Sweep.SeedGap)
	}
	res.Samples = w.grid.samples
	res.End = w.sample(w.now - origin)
	return res, nil
}

// grid samples the engines on a fixed grid over a cell.
type grid struct {
	origin, every, next time.Duration
	samples             []experiment.Sample
}

// sample reads every engine's metrics now.
func (w *world) sample(at time.Duration) experiment.Sample {
	n := len(w.engines)
	s := experiment.Sample{At: at, Running: make([]int, n), Waiting: make([]int, n), KVUsage: make([]float64, n), CPUBytes: make([]int64, n),
		Preemptions: make([]int64, n), Queries: make([]int64, n), Hits: make([]int64, n), Requests: make([]int, n),
		FirstTokens: make([]int64, n), TTFTSum: make([]float64, n), PrefillSum: make([]float64, n)}
	for i, e := range w.engines {
		m := e.Metrics()
		s.Running[i], s.Waiting[i], s.KVUsage[i] = m.Running, m.Waiting, m.KVUsage
		s.CPUBytes[i] = m.CPUTokens * int64(e.Config().KVBytesPerToken())
		s.Preemptions[i], s.Queries[i], s.Hits[i] = m.Preemptions, m.PrefixQueries, m.PrefixHits
		s.Requests[i] = w.served[i]
		if w.firsts != nil {
			s.FirstTokens[i], s.TTFTSum[i], s.PrefillSum[i] = w.firsts[i].n, w.firsts[i].ttft, w.firsts[i].prefill
		}
	}
	return s
}

// onGrid records a grid sample and schedules the next one.
func (w *world) onGrid() {
	g := w.grid
	g.samples = append(g.samples, w.sample(w.now-g.origin))
	g.next = w.now + g.every
	w.push(event{at: g.next, kind: evGrid})
}

// staleFallback returns the endpoint a prompt that no engine holds must take
// under the router's stats lag (the fallback endpoint of an earlier unheld
// prompt within the lag), or "".
func (w *world) staleFallback(ctx context.Context, tokens []uint32) (string, bool) {
	if w.router.StatsLag <= 0 || !fallsBack(w.policy) {
		return "", false
	}
	ms, err := (picker.LMCacheView{Index: w.index}).Match(ctx, tokens, w.addrs)
	if err != nil {
		return "", false
	}
	for _, m := range ms {
		if m.Matched > 0 {
			return "", false
		}
	}
	if w.fallback.addr != "" && w.now-w.fallback.at <= w.router.StatsLag {
		return w.fallback.addr, true
	}
	return "", true
}

// fallsBack reports whether policy routes prompts that nobody holds by the
// QPS fallback (the decision the router's stats lag affects).
func fallsBack(policy string) bool {
	return policy == "kvaware" || policy == "loadaware" || policy == "session"
}
