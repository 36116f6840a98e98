// Package experiment holds the words every benchmark run speaks, whichever
// clock drives it: an Arm (a policy and its beta), a Config (fleet, engine
// model, workload, protocol, arms and seeds), a Run (one arm on one seed: its
// per-request Rows, its engines' counters and running samples), Results (a
// sweep's runs) and the engines' Samples; and the saved-results file that
// stores them (Save, Load).
//
// Two drivers produce Runs: bench/vtime in virtual time and bench/live on the
// wall clock. They import this package and nothing of each other; the
// analysis, the reports and the paired comparisons read only these types.
//
// experiment runs nothing: it opens no sockets and starts no goroutines.
package experiment

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/bench/workload"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/scoring"
)

// Arm is one cell of the sweep: a policy and its beta.
type Arm struct {
	Name   string  // label in tables and files, e.g. "loadaware-b1"
	Policy string  // a scoring policy name, or PolicyGIE
	Beta   float64 // loadaware's load weight
	// Residency weighs the engines' LoRA adapters (picker.Options.Adapters, with
	// Config.AdapterCost; for PolicyGIE, GIE's lora-affinity-scorer); its name ends
	// in ResidencySuffix.
	Residency bool
	// Ranks tells the data-parallel ranks behind each engine apart (the picker's
	// --kv-events-dp-size is Config.DPRanks): the picker chooses a rank and pins the
	// request to it. Without it the picker sees one endpoint and vLLM's balancer
	// chooses. Its name ends in RanksSuffix.
	Ranks bool
	// ScrapedRanks has a Ranks arm weigh the ranks' scraped loads besides its bookings
	// (picker.Options.RankMetrics, --kv-events-dp-rank-metrics; decision 0831); its name
	// ends in ScrapedSuffix.
	ScrapedRanks bool
}

// ScrapedSuffix ends the name of a Ranks arm that weighs the ranks' scraped loads too
// ("loadaware-b1+ranks+scraped").
const ScrapedSuffix = "+scraped"

// MaxPickers bounds Config.Pickers: a handful of replicas is what deployments run.
const MaxPickers = 16

// RanksSuffix ends the name of an arm that tells data-parallel ranks apart
// ("loadaware-b1+ranks").
const RanksSuffix = "+ranks"

// ResidencySuffix ends the name of an arm that weighs adapter residency
// ("loadaware-b1+residency").
const ResidencySuffix = "+residency"

// PolicyGIE is the bench-only arm that routes with GIE v1.5.0's own scheduler
// (bench/peers/gie) instead of our picker. It is not a scoring policy: only
// virtual time (bench/vtime) runs it; the picker and the live modes do not
// know it.
const PolicyGIE = "gie"

// DefaultArms returns the published arms plus leastload: kvaware, roundrobin,
// loadaware at beta 0, 0.5, 1 and 2, and leastload.
func DefaultArms() []Arm {
	return []Arm{
		{Name: "kvaware", Policy: "kvaware"},
		{Name: "roundrobin", Policy: "roundrobin"},
		{Name: "loadaware-b0", Policy: "loadaware", Beta: 0},
		{Name: "loadaware-b0.5", Policy: "loadaware", Beta: 0.5},
		{Name: "loadaware-b1", Policy: "loadaware", Beta: 1},
		{Name: "loadaware-b2", Policy: "loadaware", Beta: 2},
		{Name: "leastload", Policy: "leastload"},
	}
}

// Config is everything a sweep depends on.
type Config struct {
	Workload       workload.Config
	Engine         sim.Config
	Engines        int                // simulated engines (GPUs)
	Slowdowns      []float64          // per-engine step-time factor (overrides Engine.Slowdown); missing entries use Engine.Slowdown
	HostDelays     []time.Duration    // per-engine extra host time per step (overrides Engine.HostDelay); missing entries use Engine.HostDelay
	Arms           []Arm              //
	Seeds          []uint64           // one measured run per arm and seed
	Protocol       string             // ProtocolPublished (one fleet per arm, seeds back to back) or ProtocolPerSeed
	SeedGap        time.Duration      // published protocol: idle time between a seed's last completion and the next seed's first send
	Warmup         int                // per-seed protocol: requests run (and discarded) before each measured seed, from a seed-derived warm-up seed
	SampleInterval time.Duration      // how often each engine's running count is sampled
	HashSeed       string             // the engines' PYTHONHASHSEED, for LMCache chunk keys
	Router         Router             // the router and data path in front of the engines
	CacheSource    string             // what the picker learns the engines' caches from: picker.SourceLMCache (default when empty), SourceVLLMEvents or SourceBoth
	AdapterCost    picker.AdapterCost // the residency term of the arms with Residency
	DPRanks        int                // data-parallel ranks behind each engine's port (sim.DP); 0 or 1: none
	// Pickers is how many picker replicas route in turn (request i by replica i mod
	// Pickers), each booking on its own fleet and seeing the others' bookings per
	// endpoint as remote load at once (the replicas' gossip without delay or loss), but
	// not per rank; virtual time only. 0 or 1: one picker.
	Pickers int
	Workers int // runs in parallel; 0 = GOMAXPROCS
}

// The protocols a sweep can follow.
const (
	// ProtocolPublished is the published experiment's: per arm, a cold
	// fleet, the warm-up routed by the arm (2 passes over the prefixes in
	// prefix order, 4 at a time), then every seed back to back on the same
	// engines, SeedGap after the previous seed's last completion.
	ProtocolPublished = "published"
	// ProtocolPerSeed gives every seed a fleet of its own, warmed up by
	// Warmup requests of a seed-derived workload through the arm: seeds
	// independent of their order.
	ProtocolPerSeed = "per-seed"
)

// DefaultConfig returns the published sweep: 7 arms x 20 seeds x 500
// requests on 2 engines under the published protocol, engine 1 the slower
// one (docs/bench/simulator.md), behind the published Python router.
func DefaultConfig() Config {
	return Config{
		Workload:       workload.DefaultConfig(),
		Engine:         sim.DefaultConfig(),
		Engines:        2,
		Slowdowns:      []float64{1, 1.3},
		Arms:           DefaultArms(),
		Seeds:          SeedRange(1, 20),
		Protocol:       ProtocolPublished,
		SeedGap:        DefaultSeedGap,
		Warmup:         2000,
		SampleInterval: 250 * time.Millisecond,
		HashSeed:       lmcache.DefaultHashSeed,
		Router:         PublishedRouter(),
	}
}

// Validate reports the first unusable field.
func (c Config) Validate() error {
	if err := c.Workload.Validate(); err != nil {
		return err
	}
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	if _, err := lmcache.NewHasher(lmcache.KeyConfig{HashSeed: c.HashSeed, ChunkSize: c.Engine.ChunkSize}); err != nil {
		return fmt.Errorf("experiment: LMCache hash seed and chunk size: %w", err)
	}
	switch {
	case c.Engines < 1 || c.Engines > 250:
		return fmt.Errorf("experiment: %d engines: use 1..250", c.Engines)
	case len(c.Arms) == 0:
		return errors.New("experiment: no arms: use DefaultArms() or name at least one policy")
	case len(c.Seeds) == 0:
		return errors.New("experiment: no seeds: pass at least one")
	case c.Protocol != ProtocolPublished && c.Protocol != ProtocolPerSeed:
		return fmt.Errorf("experiment: protocol %q: use %q or %q", c.Protocol, ProtocolPublished, ProtocolPerSeed)
	case c.SeedGap < 0:
		return fmt.Errorf("experiment: seed gap %v: must not be negative", c.SeedGap)
	case c.Warmup < 0:
		return fmt.Errorf("experiment: warm-up %d: use 0 (cold caches) or more", c.Warmup)
	case c.SampleInterval <= 0:
		return fmt.Errorf("experiment: sample interval %v: must be positive", c.SampleInterval)
	case len(c.Slowdowns) > c.Engines:
		return fmt.Errorf("experiment: %d slowdowns for %d engines: give at most one per engine", len(c.Slowdowns), c.Engines)
	case len(c.HostDelays) > c.Engines:
		return fmt.Errorf("experiment: %d host delays for %d engines: give at most one per engine", len(c.HostDelays), c.Engines)
	case c.Pickers < 0 || c.Pickers > MaxPickers:
		return fmt.Errorf("experiment: %d picker replicas: use 0 or 1 (one) up to %d", c.Pickers, MaxPickers)
	case c.DPRanks < 0 || c.DPRanks > sim.MaxDPRanks:
		return fmt.Errorf("experiment: %d data-parallel ranks per engine: use 0 or 1 (none) up to %d", c.DPRanks, sim.MaxDPRanks)
	}
	switch c.CacheSource {
	case "", picker.SourceLMCache, picker.SourceVLLMEvents, picker.SourceBoth:
	default:
		return fmt.Errorf("experiment: cache source %q: use %s, %s or %s", c.CacheSource, picker.SourceLMCache, picker.SourceVLLMEvents, picker.SourceBoth)
	}
	if c.Router.StatsLag < 0 || c.Router.RequestLatency < 0 || c.Router.ResponseLatency < 0 {
		return fmt.Errorf("experiment: router %+v: lags and latencies must not be negative", c.Router)
	}
	for i, d := range c.HostDelays {
		if d < 0 {
			return fmt.Errorf("experiment: host delay of engine %d is %v: must not be negative", i, d)
		}
	}
	for i, s := range c.Slowdowns {
		if !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("experiment: slowdown of engine %d is %v: use a positive factor (1 = nominal)", i, s)
		}
	}
	seen := map[string]bool{}
	for _, a := range c.Arms {
		if a.Name == "" || seen[a.Name] {
			return fmt.Errorf("experiment: arm name %q is empty or repeated: give each arm a unique name", a.Name)
		}
		seen[a.Name] = true
		if a.Ranks && (c.DPRanks < 2 || (c.CacheSource != picker.SourceVLLMEvents && c.CacheSource != picker.SourceBoth)) {
			return fmt.Errorf("experiment: arm %s tells data-parallel ranks apart: it needs 2 or more ranks per engine (%d) and vLLM's KV events as the cache source (%q), which name the rank", a.Name, c.DPRanks, c.CacheSource)
		}
		if a.Policy == PolicyGIE {
			continue
		}
		if _, err := scoring.New(a.Policy, scoring.Params{Beta: a.Beta, KVThreshold: scoring.DefaultParams().KVThreshold}, scoring.NewState()); err != nil {
			return fmt.Errorf("experiment: arm %s: %w", a.Name, err)
		}
	}
	return nil
}

// DefaultSeedGap is the published driver's gap between seeds: 0.41-0.48 s
// from one seed's last completion to the next seed's first send in every
// published cell (median 0.43 s).
const DefaultSeedGap = 430 * time.Millisecond

// DefaultScrapeInterval is the published Prometheus step (5 s).
const DefaultScrapeInterval = 5 * time.Second

// ProtocolText says in a few words how the sweep's seeds run.
func (c Config) ProtocolText() string {
	if c.Protocol == ProtocolPublished {
		return fmt.Sprintf("published protocol: per arm a cold fleet, %d warm-up passes over the prefixes %d at a time, the seeds back to back %v apart",
			workload.WarmupPasses, workload.WarmupInFlight, c.SeedGap)
	}
	return fmt.Sprintf("per-seed protocol: each seed on a fleet warmed up by %d requests", c.Warmup)
}

// EngineNote says how engine i differs from the nominal model, or "".
func (c Config) EngineNote(i int) string {
	e := c.EngineConfig(i)
	var parts []string
	if e.Slowdown != 1 {
		parts = append(parts, fmt.Sprintf("%gx slower steps", e.Slowdown))
	}
	if e.HostDelay > 0 {
		parts = append(parts, fmt.Sprintf("+%v host time per step", e.HostDelay))
	}
	return strings.Join(parts, ", ")
}

// EngineConfig returns engine i's model: cfg.Engine with its step-time factor
// from cfg.Slowdowns.
func (c Config) EngineConfig(i int) sim.Config {
	e := c.Engine
	if i < len(c.Slowdowns) {
		e.Slowdown = c.Slowdowns[i]
	}
	if i < len(c.HostDelays) {
		e.HostDelay = c.HostDelays[i]
	}
	return e
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
