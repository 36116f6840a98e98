package experiment

import (
	"fmt"
	"math"
	"time"

	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/lmcache"
)

// Row is one measured request, as the published per-request CSV has it.
type Row struct {
	Index            int
	PrefixID         int
	SendAt           float64 // seconds from the seed's first send slot (the workload's time zero)
	TTFT             float64 // seconds; NaN when no token arrived
	E2E              float64 // seconds; NaN when no token arrived
	PromptTokens     int
	CompletionTokens int
	Status           string // "ok" or "error"
	Error            string
	ITLs             []float64 // milliseconds between consecutive tokens
	Engine           string    // the endpoint the picker chose
	CachedTokens     int       // GPU prefix-cache hit at admission
	LoadedTokens     int       // loaded from the LMCache CPU tier at admission
	Preemptions      int
}

// EngineStats are one engine's counters over the measured seed.
type EngineStats struct {
	Addr          string
	PrefixQueries int64
	PrefixHits    int64
	Preemptions   int64
	Requests      int
}

// Run is one arm on one seed.
type Run struct {
	Arm      Arm
	Seed     uint64
	Rows     []Row
	Engines  []EngineStats
	Interval time.Duration // between samples
	Running  [][]int       // Running[i][e]: engine e's running requests at sample i of the send window
	Window   float64       // send window, seconds (first to last send)
	Span     float64       // first send to last completion, seconds (see Span)
}

// Span is the time from the first send of any row to the last completion
// (SendAt+E2E) of a row that has one, in seconds: a Run's Span. It is 0 when
// no row completed.
func Span(rows []Row) float64 {
	first, last := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		first = math.Min(first, r.SendAt)
		if !math.IsNaN(r.E2E) {
			last = math.Max(last, r.SendAt+r.E2E)
		}
	}
	if math.IsInf(last, 0) {
		return 0
	}
	return last - first
}

// Results is a sweep's runs, arm-major in config order, seeds in config order.
type Results struct {
	Config Config
	Runs   []Run
}

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

// Warm is a fleet as a measured seed finds it: the engines after the warm-up
// of one arm and seed, and every LMCache event they reported, in the order the
// index applied them.
type Warm struct {
	Engines []*sim.Engine     // idle; caches as the warm-up left them; engine i is InstanceID(i)
	Now     time.Duration     // the engines' clock: the end of the warm-up and its idle second
	Events  []lmcache.Message // KVAdmitMsg and KVEvictMsg of every engine, in index order
}

// Addrs returns the engine addresses a sweep with n engines uses: loopback
// addresses, one per engine (nothing listens on them in virtual time).
func Addrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("127.0.1.%d:8000", i+1)
	}
	return out
}

// InstanceID names engine i's LMCache instance (as the chart names it after
// the pod), in virtual time and in the live mode.
func InstanceID(i int) string { return fmt.Sprintf("vllm-%d", i) }

// Location is the storage location the simulated LMCache reports its chunks
// in (the CPU tier).
const Location = "LocalCPUBackend"
