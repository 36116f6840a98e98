package scoring

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// peerCase is one decision of a peer policy. wantOrder is a full ranking ("a:1,b:1") or,
// without a comma, just the winner.
type peerCase struct {
	name       string
	prompt     int
	cands      []Candidate
	wantOrder  string
	wantReason string
	wantScore  []float64 // in ranking order; nil = not checked
}

func runPeerCases(t *testing.T, policy string, tests []peerCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustNew(t, policy, DefaultParams(), NewState()).Rank(Input{PromptTokens: tt.prompt, Now: t0, Candidates: tt.cands})
			if len(rs) != len(tt.cands) {
				t.Fatalf("ranked %d of %d candidates", len(rs), len(tt.cands))
			}
			got := addrs(rs)
			if !strings.Contains(tt.wantOrder, ",") {
				got = rs[0].Addr
			}
			if got != tt.wantOrder {
				t.Fatalf("order = %s, want %s (%+v)", got, tt.wantOrder, rs)
			}
			for i, r := range rs {
				if r.Reason != tt.wantReason {
					t.Fatalf("reason[%d] = %s, want %s", i, r.Reason, tt.wantReason)
				}
			}
			for i, w := range tt.wantScore {
				if math.Abs(rs[i].Score-w) > 1e-9 {
					t.Errorf("score[%d] (%s) = %v, want %v", i, rs[i].Addr, rs[i].Score, w)
				}
			}
		})
	}
}

func TestSGLangCacheAware(t *testing.T) {
	runPeerCases(t, "sglang-cache-aware", []peerCase{
		{name: "imbalanced on both counts: least loaded, the full hit is ignored", prompt: 1000,
			cands:     []Candidate{cand("a:1", 1000, 0, 100), cand("b:1", 0, -1, 30)},
			wantOrder: "b:1,a:1", wantReason: ReasonImbalance},
		{name: "a gap of exactly 64 is not imbalanced: best match", prompt: 1000,
			cands:     []Candidate{cand("a:1", 1000, 0, 96), cand("b:1", 0, -1, 32)},
			wantOrder: "a:1,b:1", wantReason: ReasonBestMatch, wantScore: []float64{1, 0}},
		{name: "a gap of 65 (and 97 > 1.5 x 32) is imbalanced", prompt: 1000,
			cands:     []Candidate{cand("a:1", 1000, 0, 97), cand("b:1", 0, -1, 32)},
			wantOrder: "b:1,a:1", wantReason: ReasonImbalance},
		{name: "max exactly 1.5 x min is not imbalanced whatever the gap", prompt: 1000,
			cands:     []Candidate{cand("a:1", 1000, 0, 195), cand("b:1", 0, -1, 130)},
			wantOrder: "a:1,b:1", wantReason: ReasonBestMatch},
		{name: "max just over 1.5 x min with a gap over 64 is imbalanced", prompt: 1000,
			cands:     []Candidate{cand("a:1", 1000, 0, 196), cand("b:1", 0, -1, 130)},
			wantOrder: "b:1,a:1", wantReason: ReasonImbalance},
		{name: "a match ratio of exactly 0.3 is not enough: least loaded", prompt: 1000,
			cands:     []Candidate{cand("a:1", 300, 0, 5), cand("b:1", 0, -1, 0)},
			wantOrder: "b:1,a:1", wantReason: ReasonLowMatch},
		{name: "a match ratio just over 0.3 wins however busy (within balance)", prompt: 1000,
			cands:     []Candidate{cand("a:1", 301, 0, 5), cand("b:1", 0, -1, 0)},
			wantOrder: "a:1,b:1", wantReason: ReasonBestMatch},
		{name: "the longest match wins, not the first holder", prompt: 1000,
			cands:     []Candidate{cand("a:1", 400, 0, 0), cand("b:1", 900, 1, 3), cand("c:1", 0, -1, 0)},
			wantOrder: "b:1,a:1,c:1", wantReason: ReasonBestMatch, wantScore: []float64{0.9, 0.4, 0}},
		{name: "equal best matches go to the smallest address, not the idler", prompt: 1000,
			cands:     []Candidate{cand("b:1", 500, 0, 0), cand("a:1", 500, 1, 9)},
			wantOrder: "a:1,b:1", wantReason: ReasonBestMatch},
		{name: "low match, equal loads: smallest address", prompt: 1000,
			cands:     []Candidate{cand("c:1", 0, -1, 1), cand("b:1", 0, -1, 1), cand("a:1", 100, 0, 1)},
			wantOrder: "a:1,b:1,c:1", wantReason: ReasonLowMatch},
		{name: "no token ids: least loaded", prompt: 0,
			cands:     []Candidate{cand("a:1", 0, -1, 2), cand("b:1", 0, -1, 1)},
			wantOrder: "b:1,a:1", wantReason: ReasonLowMatch},
	})
}

func TestAIBrixPrefixCache(t *testing.T) {
	runPeerCases(t, "aibrix-prefix-cache", []peerCase{
		{name: "running differ by 9: least-request, the holder is ignored", prompt: 1000,
			cands:     []Candidate{cand("a:1", 1000, 0, 9), cand("b:1", 0, -1, 0)},
			wantOrder: "b:1,a:1", wantReason: ReasonImbalance},
		{name: "running differ by exactly 8: balanced, and the holder at exactly mean + sigma is taken", prompt: 1000,
			// mean 4, sigma 4: bound 8.
			cands:     []Candidate{cand("a:1", 1000, 0, 8), cand("b:1", 0, -1, 0)},
			wantOrder: "a:1,b:1", wantReason: ReasonBestMatch},
		{name: "the best holder above mean + sigma is passed over for the next holder", prompt: 1000,
			// running 6, 1, 0: mean 2.33, sigma 2.62, bound 4.96.
			cands:     []Candidate{cand("a:1", 1000, 0, 6), cand("b:1", 500, 1, 1), cand("c:1", 0, -1, 0)},
			wantOrder: "b:1,c:1,a:1", wantReason: ReasonBestMatch},
		{name: "every holder above mean + sigma: least-request", prompt: 1000,
			// running 5, 0, 0: mean 1.67, sigma 2.36, bound 4.02.
			cands:     []Candidate{cand("a:1", 1000, 0, 5), cand("c:1", 0, -1, 0), cand("b:1", 0, -1, 0)},
			wantOrder: "b:1,c:1,a:1", wantReason: ReasonHoldersBusy},
		{name: "equal fractions: fewer running first", prompt: 1000,
			cands:     []Candidate{cand("a:1", 500, 0, 2), cand("b:1", 500, 1, 1), cand("c:1", 0, -1, 0)},
			wantOrder: "b:1,c:1,a:1", wantReason: ReasonBestMatch},
		{name: "equal fractions and running: smallest address", prompt: 1000,
			cands:     []Candidate{cand("b:1", 500, 0, 1), cand("a:1", 500, 1, 1), cand("c:1", 0, -1, 1)},
			wantOrder: "a:1,b:1,c:1", wantReason: ReasonBestMatch},
		{name: "a higher fraction beats fewer running", prompt: 1000,
			cands:     []Candidate{cand("a:1", 400, 0, 1), cand("b:1", 600, 1, 2)},
			wantOrder: "b:1,a:1", wantReason: ReasonBestMatch},
		{name: "nobody holds the prompt: least-request", prompt: 1000,
			cands:     []Candidate{cand("a:1", 0, -1, 3), cand("b:1", 0, -1, 2)},
			wantOrder: "b:1,a:1", wantReason: ReasonLowMatch},
	})
}

// scraped gives c engine metrics as a scrape shows them.
func scraped(c Candidate, waiting int, kv float64) Candidate {
	c.Engine = EngineMetrics{Known: true, Waiting: waiting, KVUsage: kv}
	return c
}

// sized gives c the picker's account of its requests in flight.
func sized(c Candidate, prefill, active, fresh int) Candidate {
	c.InFlightPrefill, c.ActiveBlocks, c.NewBlocks = prefill, active, fresh
	return c
}

func TestGIEDefault(t *testing.T) {
	runPeerCases(t, "gie-default", []peerCase{
		// GIE v1.5.0's own scorer tests, combined: queuedepth/queue_test.go "Different queue
		// sizes" (10, 5, 0 score 0, 0.5, 1) and kvcacheutilization/kvcache_utilization_test.go
		// "Different KV cache utilization" (0.8, 0.5, 0 score 0.2, 0.5, 1), weights 2 and 2.
		{name: "GIE's queue and KV scorer tests, weighted", prompt: 1000,
			cands:     []Candidate{scraped(cand("a:1", 0, -1, 0), 10, 0.8), scraped(cand("b:1", 0, -1, 0), 5, 0.5), scraped(cand("c:1", 0, -1, 0), 0, 0)},
			wantOrder: "c:1,b:1,a:1", wantReason: ReasonWeighted, wantScore: []float64{4, 2, 0.4}},
		{name: "equal queues (GIE's 'Same queue sizes': 1 each): the prefix decides", prompt: 1000,
			cands:     []Candidate{scraped(cand("a:1", 500, 0, 2), 5, 0.5), scraped(cand("b:1", 1000, 1, 2), 5, 0.5)},
			wantOrder: "b:1,a:1", wantReason: ReasonWeighted, wantScore: []float64{6, 4.5}},
		{name: "in-flight is not read: the engines' queues are", prompt: 1000,
			cands:     []Candidate{scraped(cand("a:1", 0, -1, 9), 0, 0.2), scraped(cand("b:1", 0, -1, 0), 3, 0.2)},
			wantOrder: "a:1,b:1", wantReason: ReasonWeighted, wantScore: []float64{3.6, 1.6}},
		{name: "a full hit leaves only when its KV usage is more than 0.5 above the other's", prompt: 1000,
			cands:     []Candidate{scraped(cand("a:1", 1000, 0, 4), 0, 0.9), scraped(cand("b:1", 0, -1, 0), 0, 0.3)},
			wantOrder: "a:1,b:1", wantReason: ReasonWeighted, wantScore: []float64{5.2, 3.4}},
		{name: "no scrape yet reads as idle, as GIE's metrics of a new pod: the prefix decides", prompt: 1000,
			cands:     []Candidate{cand("a:1", 0, -1, 0), cand("b:1", 300, 0, 7)},
			wantOrder: "b:1,a:1", wantReason: ReasonWeighted, wantScore: []float64{4.9, 4}},
		{name: "ties go to the smallest address", prompt: 300,
			cands:     []Candidate{scraped(cand("b:1", 0, -1, 0), 1, 0.5), scraped(cand("a:1", 0, -1, 0), 1, 0.5)},
			wantOrder: "a:1,b:1", wantReason: ReasonWeighted, wantScore: []float64{3, 3}},
	})
}

func TestLLMDPrecise(t *testing.T) {
	runPeerCases(t, "llmd-precise", []peerCase{
		{name: "holders are min-max normalized: the shorter holder scores like a non-holder", prompt: 1000,
			cands:     []Candidate{scraped(cand("a:1", 900, 0, 1), 0, 0.5), scraped(cand("b:1", 300, 1, 1), 0, 0.5), scraped(cand("c:1", 0, -1, 1), 0, 0.5)},
			wantOrder: "a:1,b:1,c:1", wantReason: ReasonWeighted, wantScore: []float64{6, 3, 3}},
		{name: "a lone holder scores 1 however little it holds", prompt: 1000,
			cands:     []Candidate{scraped(cand("a:1", 16, 0, 0), 0, 0), scraped(cand("b:1", 0, -1, 0), 0, 0)},
			wantOrder: "a:1,b:1", wantReason: ReasonWeighted, wantScore: []float64{7, 4}},
		{name: "holders matching the same all score 1: the waiting queue decides", prompt: 1000,
			cands:     []Candidate{scraped(cand("a:1", 500, 0, 1), 4, 0), scraped(cand("b:1", 500, 1, 3), 2, 0), scraped(cand("c:1", 0, -1, 0), 0, 0)},
			wantOrder: "b:1,a:1,c:1", wantReason: ReasonWeighted, wantScore: []float64{6, 5, 4}},
		{name: "a full holder with the longest queue and a cache 0.6 fuller loses to an idle non-holder", prompt: 1000,
			cands:     []Candidate{scraped(cand("a:1", 1000, 0, 3), 6, 0.7), scraped(cand("b:1", 0, -1, 0), 0, 0.1)},
			wantOrder: "b:1,a:1", wantReason: ReasonWeighted, wantScore: []float64{3.8, 3.6}},
	})
}

func TestDynamoKV(t *testing.T) {
	runPeerCases(t, "dynamo-kv", []peerCase{
		// Dynamo's own test of ActiveSequences (lib/llm/src/kv_router/sequence.rs,
		// test_multiworker_sequences): workers holding blocks [0 1 2], [3 4] and [0 1 2 3],
		// asked for [0 1], have 3, 4 and 4 potential blocks; their prefill tokens are 12, 8
		// and 16 (no overlap, 4-token blocks). Here in 16-token blocks: the same potential
		// blocks, and 48, 32 and 64 queued prefill tokens; the prompt is those two blocks.
		{name: "Dynamo's potential-blocks test as costs", prompt: 32,
			cands:     []Candidate{sized(cand("w0:1", 0, -1, 1), 48, 3, 0), sized(cand("w1:1", 0, -1, 1), 32, 2, 2), sized(cand("w2:1", 0, -1, 1), 64, 4, 0)},
			wantOrder: "w0:1,w1:1,w2:1", wantReason: ReasonLowestCost, wantScore: []float64{-8, -8, -10}},
		{name: "shared blocks count once: a busy worker holding the prompt's blocks is cheap", prompt: 1600,
			cands:     []Candidate{sized(cand("a:1", 1600, 0, 5), 0, 100, 0), sized(cand("b:1", 0, -1, 0), 0, 0, 100)},
			wantOrder: "a:1,b:1", wantReason: ReasonLowestCost, wantScore: []float64{-100, -200}},
		{name: "other requests' queued prefill tips it to the idle worker", prompt: 1600,
			cands:     []Candidate{sized(cand("a:1", 1600, 0, 5), 1616, 100, 0), sized(cand("b:1", 0, -1, 0), 0, 0, 100)},
			wantOrder: "b:1,a:1", wantReason: ReasonLowestCost, wantScore: []float64{-200, -201}},
		{name: "the overlap counts in whole blocks, the rest in fractions of one", prompt: 1600,
			// a: 1590 matched is 99 blocks (1584 tokens): (1600 - 1584) / 16 = 1; b: 1592 is 99 too.
			cands:     []Candidate{sized(cand("a:1", 1590, 0, 0), 8, 0, 100), sized(cand("b:1", 1592, 1, 0), 0, 0, 100)},
			wantOrder: "b:1,a:1", wantReason: ReasonLowestCost, wantScore: []float64{-101, -101.5}},
		{name: "in-flight requests without their sizes are not read", prompt: 32,
			cands:     []Candidate{sized(cand("a:1", 0, -1, 9), 0, 0, 2), sized(cand("b:1", 0, -1, 0), 0, 0, 2)},
			wantOrder: "a:1,b:1", wantReason: ReasonLowestCost, wantScore: []float64{-4, -4}},
	})
}

func TestLLMDSticky(t *testing.T) {
	runPeerCases(t, "llmd-sticky", []peerCase{
		// llm-d's own filter tests (prefixcacheaffinity/plugin_test.go): TestFilter_NarrowToSticky
		// (scores 0.90, 0.85, 0.10 keep two) ...
		{name: "narrowed to the endpoints holding 0.80: the fewer in-flight tokens of those wins", prompt: 100,
			cands:     []Candidate{sized(cand("a:1", 90, 0, 0), 100, 0, 0), sized(cand("b:1", 85, 1, 0), 120, 0, 0), sized(cand("c:1", 10, 2, 0), 50, 0, 0)},
			wantOrder: "a:1,b:1,c:1", wantReason: ReasonSticky},
		// ... and TestFilter_NoStickyEndpoints (0.10, 0.20, 0.50 keep all).
		{name: "nobody holds 0.80: the fewest in-flight tokens of all", prompt: 100,
			cands:     []Candidate{sized(cand("a:1", 10, 0, 0), 30, 0, 0), sized(cand("b:1", 20, 1, 0), 20, 0, 0), sized(cand("c:1", 50, 2, 0), 10, 0, 0)},
			wantOrder: "c:1,b:1,a:1", wantReason: ReasonTokenLoad},
		{name: "exactly 0.80 is sticky", prompt: 100,
			cands:     []Candidate{sized(cand("a:1", 80, 0, 0), 4000, 0, 0), sized(cand("b:1", 0, -1, 0), 0, 0, 0)},
			wantOrder: "a:1", wantReason: ReasonSticky},
		{name: "holders 286720 tokens busier than the idlest other: still sticky", prompt: 100,
			cands:     []Candidate{sized(cand("a:1", 100, 0, 0), 286720, 0, 0), sized(cand("b:1", 0, -1, 0), 0, 0, 0)},
			wantOrder: "a:1", wantReason: ReasonSticky},
		{name: "one token more breaks it: the fewest in-flight tokens of all", prompt: 100,
			cands:     []Candidate{sized(cand("a:1", 100, 0, 0), 286721, 0, 0), sized(cand("b:1", 0, -1, 0), 0, 0, 0)},
			wantOrder: "b:1", wantReason: ReasonUnstuck},
	})
}

// The configurable thresholds reproduce the peers' own tests at their settings.
func TestPeerUpstreamSettings(t *testing.T) {
	rank := func(p Policy, prompt int, cs ...Candidate) []Ranked {
		return p.Rank(Input{PromptTokens: prompt, Now: t0, Candidates: cs})
	}
	// SGLang, cache_aware.rs test_cache_aware_with_imbalanced_load: cache threshold 0.5,
	// balance 5 and 2.0; worker 1 at load 20, worker 2 at 0, worker 1 holding the text:
	// worker 2, whatever the cache.
	rs := rank(SGLangCacheAware{BalanceAbs: 5, BalanceRel: 2, CacheThreshold: 0.5}, 4, cand("w1:1", 4, 0, 20), cand("w2:1", 0, -1, 0))
	if rs[0].Addr != "w2:1" || rs[0].Reason != ReasonImbalance {
		t.Errorf("SGLang imbalanced-load test: %s (%s), want w2:1 (imbalance)", rs[0].Addr, rs[0].Reason)
	}
	// At the defaults (64, 1.5) the same loads are balanced: the holder wins.
	rs = rank(SGLangCacheAware{}, 4, cand("w1:1", 4, 0, 20), cand("w2:1", 0, -1, 0))
	if rs[0].Addr != "w1:1" || rs[0].Reason != ReasonBestMatch {
		t.Errorf("SGLang at the defaults: %s (%s), want w1:1 (best-match)", rs[0].Addr, rs[0].Reason)
	}
	// llm-d, TestFilter_InFlightTokenPenaltyBreaksStickiness (penalty 100: a at 0.90 with
	// 500 tokens, b at 0.10 with 50: both kept) and ...WithinThreshold (penalty 1000: a alone).
	rs = rank(LLMDSticky{TokenGate: 100}, 100, sized(cand("a:1", 90, 0, 0), 500, 0, 0), sized(cand("b:1", 10, 1, 0), 50, 0, 0))
	if rs[0].Addr != "b:1" || rs[0].Reason != ReasonUnstuck {
		t.Errorf("llm-d penalty 100: %s (%s), want b:1 (unstuck)", rs[0].Addr, rs[0].Reason)
	}
	rs = rank(LLMDSticky{TokenGate: 1000}, 100, sized(cand("a:1", 90, 0, 0), 500, 0, 0), sized(cand("b:1", 10, 1, 0), 50, 0, 0))
	if rs[0].Addr != "a:1" || rs[0].Reason != ReasonSticky {
		t.Errorf("llm-d penalty 1000: %s (%s), want a:1 (sticky)", rs[0].Addr, rs[0].Reason)
	}
}

// llm-d's picker breaks the constant ties of idle endpoints at random; the re-statement's
// tie-break spreads them and repeats for the same decision time.
func TestLLMDStickyTiesSpread(t *testing.T) {
	p := LLMDSticky{}
	cs := []Candidate{cand("a:1", 0, -1, 0), cand("b:1", 0, -1, 0), cand("c:1", 0, -1, 0)}
	won := map[string]int{}
	for i := range 30 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		first := p.Rank(Input{PromptTokens: 100, Now: now, Candidates: slices.Clone(cs)})[0].Addr
		if again := p.Rank(Input{PromptTokens: 100, Now: now, Candidates: slices.Clone(cs)})[0].Addr; again != first {
			t.Fatalf("the same decision time chose %s, then %s", first, again)
		}
		won[first]++
	}
	if len(won) != 3 {
		t.Fatalf("30 tied decisions went to %v; want all three endpoints used", won)
	}
}

// AIBrix's own end-to-end test of its prefix-cache router (pkg/plugins/gateway/algorithms/
// prefix_cache_test.go, Test_PrefixCacheE2E), its decisions at the request counts it sets.
func TestAIBrixUpstreamE2E(t *testing.T) {
	runPeerCases(t, "aibrix-prefix-cache", []peerCase{
		{name: "prefix match, load balanced: the cached pod", prompt: 8,
			cands:     []Candidate{cand("p1:1", 0, -1, 0), cand("p2:1", 0, -1, 0), cand("p3:1", 0, -1, 1), cand("p4:1", 8, 0, 1)},
			wantOrder: "p4:1", wantReason: ReasonBestMatch},
		{name: "prefix match, the holder above mean + sigma: a least-request pod, not the holder", prompt: 4,
			cands:     []Candidate{cand("p1:1", 0, -1, 0), cand("p2:1", 0, -1, 0), cand("p3:1", 0, -1, 1), cand("p4:1", 4, 0, 2)},
			wantOrder: "p1:1", wantReason: ReasonHoldersBusy},
		{name: "a running gap of 9: the least-request pod whatever the match", prompt: 8,
			cands:     []Candidate{cand("p1:1", 0, -1, 0), cand("p2:1", 4, 1, 9), cand("p3:1", 0, -1, 1), cand("p4:1", 8, 0, 2)},
			wantOrder: "p1:1", wantReason: ReasonImbalance},
	})
}

// SGLang's --worker-queue-limit (pull request 39168) as its description states it: an engine
// with the limit or more waiting leaves the cache-affinity candidates (the boundary is <), an
// unknown queue admits, the request goes to another holder of the prefix, else to the least
// loaded engine that is not queueing.
func TestSGLangWorkerQueueLimit(t *testing.T) {
	p := SGLangCacheAware{WorkerQueueLimit: 4}
	if p.Needs()&NeedsEngineMetrics == 0 || (SGLangCacheAware{}).Needs()&NeedsEngineMetrics != 0 {
		t.Fatal("the gate needs the engines' metrics, and only the gate")
	}
	for _, tc := range []struct {
		name      string
		cands     []Candidate
		want, why string
	}{
		{"3 waiting is under the limit: the holder", []Candidate{scraped(cand("a:1", 900, 0, 5), 3, 0), scraped(cand("b:1", 0, -1, 0), 0, 0)}, "a:1", ReasonBestMatch},
		{"4 waiting is at the limit: gated, the other holder of the prefix", []Candidate{scraped(cand("a:1", 900, 0, 5), 4, 0), scraped(cand("b:1", 800, 1, 7), 0, 0), scraped(cand("c:1", 0, -1, 0), 0, 0)}, "b:1", ReasonBestMatch},
		{"no other holder: the least loaded engine that is not queueing", []Candidate{scraped(cand("a:1", 900, 0, 5), 4, 0), scraped(cand("b:1", 0, -1, 3), 6, 0), scraped(cand("c:1", 0, -1, 4), 0, 0)}, "c:1", ReasonQueueGated},
		{"an unknown queue admits", []Candidate{cand("a:1", 900, 0, 5), scraped(cand("b:1", 0, -1, 0), 0, 0)}, "a:1", ReasonBestMatch},
		{"every engine queueing: the holder, as without the gate", []Candidate{scraped(cand("a:1", 900, 0, 5), 9, 0), scraped(cand("b:1", 0, -1, 0), 5, 0)}, "a:1", ReasonBestMatch},
		{"a low match is not cache-affinity traffic: the least loaded", []Candidate{scraped(cand("a:1", 100, 0, 1), 0, 0), scraped(cand("b:1", 0, -1, 0), 9, 0)}, "b:1", ReasonLowMatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := p.Rank(Input{PromptTokens: 1000, Now: t0, Candidates: tc.cands})
			if len(rs) != len(tc.cands) || rs[0].Addr != tc.want || rs[0].Reason != tc.why {
				t.Fatalf("ranked %+v; want %s first (%s)", rs, tc.want, tc.why)
			}
		})
	}
}
