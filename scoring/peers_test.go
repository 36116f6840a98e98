package scoring

import (
	"math"
	"strings"
	"testing"
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

func TestGIEDefault(t *testing.T) {
	runPeerCases(t, "gie-default", []peerCase{
		{name: "equal loads score 1 on queue each: the prefix decides", prompt: 1000,
			cands:     []Candidate{cand("a:1", 500, 0, 2), cand("b:1", 1000, 1, 2)},
			wantOrder: "b:1,a:1", wantReason: ReasonWeighted, wantScore: []float64{5, 3.5}},
		{name: "a full hit at the highest load still beats an idle cold endpoint (3 against 2)", prompt: 1000,
			cands:     []Candidate{cand("a:1", 1000, 0, 4), cand("b:1", 0, -1, 0), cand("c:1", 0, -1, 2)},
			wantOrder: "a:1,b:1,c:1", wantReason: ReasonWeighted, wantScore: []float64{3, 2, 1}},
		{name: "a half hit at the highest load loses to an idle cold endpoint", prompt: 1000,
			cands:     []Candidate{cand("a:1", 500, 0, 4), cand("b:1", 0, -1, 0)},
			wantOrder: "b:1,a:1", wantReason: ReasonWeighted, wantScore: []float64{2, 1.5}},
		{name: "a 2/3 hit at the highest load ties an idle cold endpoint: smaller address (the hit)", prompt: 300,
			cands:     []Candidate{cand("a:1", 200, 0, 4), cand("b:1", 0, -1, 0)},
			wantOrder: "a:1,b:1", wantReason: ReasonWeighted, wantScore: []float64{2, 2}},
		{name: "the same tie goes to the cold endpoint when its address is smaller", prompt: 300,
			cands:     []Candidate{cand("b:1", 200, 0, 4), cand("a:1", 0, -1, 0)},
			wantOrder: "a:1,b:1", wantReason: ReasonWeighted, wantScore: []float64{2, 2}},
		{name: "the queue score is min-max normalized", prompt: 1000,
			cands:     []Candidate{cand("a:1", 0, -1, 10), cand("b:1", 0, -1, 6), cand("c:1", 0, -1, 2)},
			wantOrder: "c:1,b:1,a:1", wantReason: ReasonWeighted, wantScore: []float64{2, 1, 0}},
	})
}

func TestLLMDPrecise(t *testing.T) {
	runPeerCases(t, "llmd-precise", []peerCase{
		{name: "holders are min-max normalized: the shorter holder scores like a non-holder", prompt: 1000,
			cands:     []Candidate{cand("a:1", 900, 0, 1), cand("b:1", 300, 1, 1), cand("c:1", 0, -1, 1)},
			wantOrder: "a:1,b:1,c:1", wantReason: ReasonWeighted, wantScore: []float64{5, 2, 2}},
		{name: "a lone holder scores 1 however little it holds", prompt: 1000,
			cands:     []Candidate{cand("a:1", 16, 0, 0), cand("b:1", 0, -1, 0)},
			wantOrder: "a:1,b:1", wantReason: ReasonWeighted, wantScore: []float64{5, 2}},
		{name: "holders matching the same all score 1: the queue decides", prompt: 1000,
			cands:     []Candidate{cand("a:1", 500, 0, 3), cand("b:1", 500, 1, 1), cand("c:1", 0, -1, 0)},
			wantOrder: "b:1,a:1,c:1", wantReason: ReasonWeighted},
		{name: "the busiest full holder beats idle non-holders (3 against 2)", prompt: 1000,
			cands:     []Candidate{cand("a:1", 1000, 0, 3), cand("b:1", 0, -1, 0), cand("c:1", 0, -1, 0)},
			wantOrder: "a:1,b:1,c:1", wantReason: ReasonWeighted, wantScore: []float64{3, 2, 2}},
		{name: "nobody holds the prompt: the queue alone, ties by address", prompt: 1000,
			cands:     []Candidate{cand("b:1", 0, -1, 0), cand("a:1", 0, -1, 0), cand("c:1", 0, -1, 2)},
			wantOrder: "a:1,b:1,c:1", wantReason: ReasonWeighted, wantScore: []float64{2, 2, 0}},
	})
}

func TestDynamoKV(t *testing.T) {
	runPeerCases(t, "dynamo-kv", []peerCase{
		{name: "a full hit with one in flight ties a cold idle endpoint (200 blocks each): smaller address", prompt: 1600,
			cands:     []Candidate{cand("a:1", 1600, 0, 1), cand("b:1", 0, -1, 0)},
			wantOrder: "a:1,b:1", wantReason: ReasonLowestCost, wantScore: []float64{-200, -200}},
		{name: "the same tie goes to the cold endpoint when its address is smaller", prompt: 1600,
			cands:     []Candidate{cand("b:1", 1600, 0, 1), cand("a:1", 0, -1, 0)},
			wantOrder: "a:1,b:1", wantReason: ReasonLowestCost, wantScore: []float64{-200, -200}},
		{name: "one uncached block more tips it to the cold endpoint", prompt: 1600,
			cands:     []Candidate{cand("a:1", 1584, 0, 1), cand("b:1", 0, -1, 0)},
			wantOrder: "b:1,a:1", wantReason: ReasonLowestCost, wantScore: []float64{-200, -201}},
		{name: "uncached tokens count in fractions of a block, no ceiling", prompt: 1600,
			cands:     []Candidate{cand("a:1", 1584, 0, 0), cand("b:1", 1592, 1, 0)},
			wantOrder: "b:1,a:1", wantReason: ReasonLowestCost, wantScore: []float64{-100.5, -101}},
		{name: "matched beyond the prompt gives no extra credit", prompt: 32,
			cands:     []Candidate{cand("a:1", 256, 0, 0), cand("b:1", 32, 1, 0)},
			wantOrder: "a:1,b:1", wantReason: ReasonLowestCost, wantScore: []float64{-2, -2}},
		{name: "no token ids: one block per request, so the least loaded wins", prompt: 0,
			cands:     []Candidate{cand("a:1", 0, -1, 2), cand("b:1", 0, -1, 1)},
			wantOrder: "b:1,a:1", wantReason: ReasonLowestCost, wantScore: []float64{-2, -3}},
	})
}
