package vtime

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// Router is the model of the router and client data path in front of the
// engines, the part of the published fleet that is not vLLM.
type Router struct {
	// StatsLag: prompts that no engine holds and that arrive within StatsLag
	// of an earlier such prompt are routed on the same request statistics,
	// so they take the same fallback endpoint. The Production Stack router
	// updates its request statistics only after the awaited LMCache lookup
	// of a request returns, so concurrent lookups read the same QPS. 0: every
	// decision sees every earlier one (our picker books synchronously).
	StatsLag time.Duration
	// RequestLatency is the client -> router -> engine API server path of a
	// request; ResponseLatency the engine -> router -> client path of every
	// streamed chunk. Their sum is what the router adds to the first token.
	RequestLatency, ResponseLatency time.Duration
}

// PublishedRouter is the Production Stack's Python router as the published
// cells ran behind it. The first token's detour through it, 48 ms, is
// measured: in every gen2 cell the client's mean TTFT exceeds the engines'
// own (vllm:time_to_first_token_seconds) by 46-54 ms (kvaware 48, loadaware
// beta 1 46, round-robin 54); the split between the two directions is
// assumed even. The stats lag (5 ms, assumed) only needs to cover requests
// sent at the same instant (the warm-up's batches of 4).
func PublishedRouter() Router {
	return Router{StatsLag: 5 * time.Millisecond, RequestLatency: 24 * time.Millisecond, ResponseLatency: 24 * time.Millisecond}
}

// EnvoyRouter is Envoy in front of the engines with this picker on ext_proc:
// decisions book synchronously (no stats lag) and the data path is Envoy's,
// with no Python proxy. Its added latency is measured by `loadaware-bench
// gwload` (gateway + picker: p50 0.2-0.4 ms, p99 under 2 ms below 100 req/s
// on loopback); 1 ms each way is an upper figure.
func EnvoyRouter() Router {
	return Router{RequestLatency: time.Millisecond, ResponseLatency: time.Millisecond}
}

// CellConfig is one cell of the published protocol.
type CellConfig struct {
	Sweep          SweepConfig   // fleet, engine model, router, workload pool, hash seed, SeedGap (Arms, Seeds, Protocol, Warmup unused)
	Arm            Arm           //
	Seeds          []CellSeed    // measured seeds, in the order they run
	SampleInterval time.Duration // the engines' metrics are sampled on this grid from the first seed's first send
	Warmup         bool          // run the published warm-up (2 passes, prefix order, 4 at a time) on the cold fleet first
}

// DefaultSeedGap is the published driver's gap between seeds: 0.41-0.48 s
// from one seed's last completion to the next seed's first send in every
// published cell (median 0.43 s).
const DefaultSeedGap = 430 * time.Millisecond

// DefaultScrapeInterval is the published Prometheus step (5 s).
const DefaultScrapeInterval = 5 * time.Second

// Sample is every engine's exported state at one instant of a cell.
type Sample struct {
	At          time.Duration // from the first seed's first send
	Running     []int         // vllm:num_requests_running
	Waiting     []int         // vllm:num_requests_waiting
	KVUsage     []float64     // vllm:kv_cache_usage_perc
	CPUBytes    []int64       // lmcache_local_cache_usage
	Preemptions []int64       // vllm:num_preemptions_total
	Queries     []int64       // vllm:prefix_cache_queries_total
	Hits        []int64       // vllm:prefix_cache_hits_total
	Requests    []int         // requests routed to each engine so far
	FirstTokens []int64       // requests that produced their first token (vllm:time_to_first_token_seconds_count)
	TTFTSum     []float64     // their engine-side TTFT, arrival at the engine to first token, seconds (_sum)
	PrefillSum  []float64     // their prefill time, first admission to first token, seconds (vllm:request_prefill_time_seconds_sum)
}

// CellResult is a cell run: one Run per seed and the engines' samples over
// the whole cell.
type CellResult struct {
	Arm       Arm
	Addrs     []string
	Runs      []Run
	SeedStart []time.Duration // each seed's first send, from the first seed's first send
	Samples   []Sample
	Start     Sample // the engines right after the warm-up
	End       Sample // the engines after the last seed
}

// Validate reports the first unusable field.
func (c CellConfig) Validate() error {
	s := c.Sweep
	s.Arms, s.Seeds, s.Warmup = []Arm{c.Arm}, []uint64{1}, 0
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
	w := &world{cfg: cfg.Sweep, addrs: Addrs(cfg.Sweep.Engines), hasher: hasher, router: cfg.Sweep.Router}
	if err := w.build(cfg.Arm); err != nil {
		return CellResult{}, err
	}
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
	samples             []Sample
}

// sample reads every engine's metrics now.
func (w *world) sample(at time.Duration) Sample {
	n := len(w.engines)
	s := Sample{At: at, Running: make([]int, n), Waiting: make([]int, n), KVUsage: make([]float64, n), CPUBytes: make([]int64, n),
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
