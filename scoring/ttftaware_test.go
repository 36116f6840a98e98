package scoring

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestTTFTAwareRanking(t *testing.T) {
	tests := []struct {
		name       string
		prompt     int
		uncached   map[string]int // State.Uncached before the decision
		cands      []Candidate
		want       string
		wantReason string
		wantEst    float64 // the winner's estimate, seconds; 0: not checked
	}{
		{"the holder with a short queue has the lowest estimate", 8000, map[string]int{"a:1": 2000},
			[]Candidate{lcand("a:1", 8000, 1, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "a:1", ReasonLowestTTFT,
			// 1 queued admission + 2,000 queued tokens + own admission (each with 1 sequence in the batch) + one step
			2*(0.025+0.00015) + 2000*198e-6 + 0.019},
		{"an idle engine takes a moved prompt at its own cost", 8000, map[string]int{"a:1": 2000},
			[]Candidate{lcand("a:1", 8000, 4, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "b:1", ReasonLowestTTFT,
			0.025 + 8000*198e-6 + 4*0.019},
		{"a queued holder keeps the prompt while the recompute would delay the queue elsewhere more", 8000, map[string]int{"a:1": 2000, "b:1": 0},
			[]Candidate{lcand("a:1", 8000, 4, 0, 0), lcand("b:1", 0, 1, 0, 0)}, "a:1", ReasonHolderSticky,
			5*(0.025+4*0.00015) + 8000*198e-6 + 4*0.019},
		{"a holder whose queue outweighs the recompute loses", 8000, map[string]int{"a:1": 2000, "b:1": 0},
			[]Candidate{lcand("a:1", 8000, 10, 0, 0), lcand("b:1", 0, 1, 0, 0)}, "b:1", ReasonLowestTTFT,
			2*(0.025+0.00015) + 8000*198e-6 + 4*0.019},
		{"every candidate saturated: nothing is diverted from the holder", 8000, map[string]int{"a:1": 2000, "b:1": 2000},
			[]Candidate{lcand("a:1", 8000, 10, 0, 0), lcand("b:1", 0, 2, 0, 0)}, "a:1", ReasonFleetSaturated, 0},
		{"nobody holds the prompt: the fewest queued and decoding", 1000, nil,
			[]Candidate{lcand("a:1", 0, 1, 5, 0), lcand("b:1", 0, 0, 2, 0)}, "b:1", ReasonLowestTTFT,
			0.025 + 2*0.00015 + 1000*198e-6 + 0.019 + 2*0.0005},
		{"decoding sequences lengthen every step until the first token", 4096, nil,
			[]Candidate{lcand("a:1", 0, 0, 40, 0), lcand("b:1", 0, 0, 10, 0)}, "b:1", ReasonLowestTTFT,
			0.025 + 10*0.00015 + 4096*198e-6 + 2*(0.019+10*0.0005)},
		{"equal everything: the smallest address", 1000, nil,
			[]Candidate{lcand("b:1", 500, 1, 4, 0), lcand("a:1", 500, 1, 4, 0)}, "a:1", ReasonLowestTTFT, 0},
		{"a match longer than the prompt counts as the prompt", 100, nil,
			[]Candidate{lcand("a:1", 5000, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "a:1", ReasonLowestTTFT, 0.025 + 0.019},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			for a, n := range tt.uncached {
				st.Uncached(a, n)
			}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: tt.prompt, Now: t0, Candidates: tt.cands})
			if len(rs) != len(tt.cands) {
				t.Fatalf("ranked %d of %d", len(rs), len(tt.cands))
			}
			if rs[0].Addr != tt.want || rs[0].Reason != tt.wantReason {
				t.Fatalf("winner %s (%s), want %s (%s): %+v", rs[0].Addr, rs[0].Reason, tt.want, tt.wantReason, rs)
			}
			if tt.wantEst != 0 && math.Abs(rs[0].Estimate-tt.wantEst) > 1e-9 {
				t.Errorf("winner's estimate %.6f s, want %.6f s", rs[0].Estimate, tt.wantEst)
			}
			for i := 1; i < len(rs); i++ {
				if rs[i].Score > rs[i-1].Score {
					t.Errorf("not best first: %+v", rs)
				}
			}
		})
	}
}

func TestTTFTAwareEmptyAndTerms(t *testing.T) {
	p := mustNew(t, "ttftaware", DefaultParams(), NewState())
	if rs := p.Rank(Input{PromptTokens: 10}); len(rs) != 0 {
		t.Fatalf("no candidates ranked %d", len(rs))
	}
	te, ok := p.(TermsExplainer)
	if !ok {
		t.Fatal("ttftaware explains no terms")
	}
	if got := string(te.AppendTerms(nil, Ranked{Estimate: 0.1234, Load: 0.05, KVWait: 0.02, Slowdown: 1.3})); got != " est_ttft=0.123 queued=0.050 kv_wait=0.020 slowdown=1.30" {
		t.Errorf("terms %q", got)
	}
}

func TestKVWait(t *testing.T) {
	step := 0.019 + 10*0.0005 // one step with 10 sequences decoding
	tests := []struct {
		name   string
		engine EngineMetrics
		decode int
		pace   time.Duration
		prompt int
		steps  float64
		want   float64
	}{
		{"not scraped: no wait", EngineMetrics{}, 10, 100 * time.Second, 1000, 1, 0},
		{"pace not measured: no wait", EngineMetrics{Known: true, KVUsage: 1, Running: 10}, 10, 0, 1000, 1, 0},
		{"the prompt fits: no wait", EngineMetrics{Known: true, KVUsage: 0.5, Running: 10}, 10, 100 * time.Second, 1000, 0, 0},
		{"a full pool: the prompt waits for the first of 10 sequences to finish", EngineMetrics{Known: true, KVUsage: 1, Running: 10}, 0, 100 * time.Second, 990, 0,
			100 / 11.0},
		{"a deficit of two sequences' footprints and one token waits for the third", EngineMetrics{Known: true, KVUsage: 1, Running: 10}, 0, 100 * time.Second, 2*9900 + 1, 0,
			100 * 3 / 11.0},
		{"a prompt larger than the pool waits for every sequence and more", EngineMetrics{Known: true, KVUsage: 1, Running: 1}, 0, 100 * time.Second, 2 * 99000, 0,
			100 * 2 / 2.0},
		{"the requests waiting ahead need an average footprint each", EngineMetrics{Known: true, KVUsage: 0.9, Running: 9, Waiting: 2}, 0, 50 * time.Second, 100, 0,
			50 * 2 / 10.0}, // need 100 + 2 x 9,900 against 9,900 free: two of 9 sequences (9,900 each) finish
		{"decoding sequences grow the KV held since the scrape and until admission", EngineMetrics{Known: true, KVUsage: 0.99, Running: 10, Age: 50 * time.Millisecond}, 10, 100 * time.Second, 1000, 2,
			func() float64 {
				used := 0.99*99000 + 10*(0.05/step+2) // 990 tokens free at the scrape, 949 at admission
				if 1000-(99000-used) <= 0 {
					return 0
				}
				return 100 / 11.0 // a deficit of 51 tokens: the first of 10 sequences
			}()},
		{"a stale scrape grows the KV held up to the pool, not past it", EngineMetrics{Known: true, KVUsage: 0.5, Running: 10, Age: time.Hour}, 10, 100 * time.Second, 1000, 0,
			100 / 11.0},
		{"an empty engine: no wait", EngineMetrics{Known: true}, 0, 100 * time.Second, 1000, 1, 0},
		{"the engine's exported pool replaces the A10's: half full of 49,500 holds 24,750", EngineMetrics{Known: true, KVUsage: 0.5, Running: 10, KVPoolTokens: 49500}, 0, 100 * time.Second, 30000, 0,
			100 * 3 / 11.0}, // a deficit of 5,250 tokens, sequences of 2,475 each: the third of 10
		{"the same reading on the A10's pool fits", EngineMetrics{Known: true, KVUsage: 0.5, Running: 10}, 0, 100 * time.Second, 30000, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Candidate{Addr: "a:1", Decode: tt.decode, DecodePace: tt.pace, Engine: tt.engine}
			if got := KVWait(c, tt.prompt, tt.steps); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("KVWait = %.9f s, want %.9f s", got, tt.want)
			}
		})
	}
}

func TestTTFTAwareLeavesAFullPool(t *testing.T) {
	// A decode-bound holder with a full KV pool loses a 1,000-token prompt it holds to an
	// idle engine, though the move recomputes the prompt: a sequence finishing frees KV
	// only every few seconds.
	full := lcand("a:1", 1000, 0, 15, 0)
	full.DecodePace, full.Engine = 200*time.Second, EngineMetrics{Known: true, KVUsage: 0.999, Running: 15}
	idle := lcand("b:1", 0, 0, 0, 0)
	idle.Engine = EngineMetrics{Known: true}
	for _, tt := range []struct {
		name  string
		cands []Candidate
		want  string
	}{
		{"scraped full", []Candidate{full, idle}, "b:1"},
		{"not scraped", []Candidate{func() Candidate { c := full; c.Engine = EngineMetrics{}; return c }(), idle}, "a:1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustNew(t, "ttftaware", DefaultParams(), NewState()).Rank(Input{PromptTokens: 1000, Now: t0, Candidates: tt.cands})
			if rs[0].Addr != tt.want {
				t.Fatalf("winner %s, want %s: %+v", rs[0].Addr, tt.want, rs)
			}
			if tt.want == "b:1" && rs[1].KVWait <= 0 {
				t.Errorf("the full holder's KV wait %v, want positive", rs[1].KVWait)
			}
		})
	}
}

func TestStateUncachedMean(t *testing.T) {
	st := NewState()
	st.Uncached("a:1", 1600)
	if got := st.uncached["a:1"]; got != 1600 {
		t.Fatalf("first booking: mean %v, want 1600", got)
	}
	st.Uncached("a:1", 0)
	if got, want := st.uncached["a:1"], 1600-1600.0/UncachedMemory; got != want {
		t.Fatalf("second booking: mean %v, want %v", got, want)
	}
	st.Uncached("b:1", 7)
	st.Forget([]string{"b:1"})
	if _, ok := st.uncached["a:1"]; ok || st.uncached["b:1"] != 7 {
		t.Fatalf("Forget kept %v", st.uncached)
	}
	if !strings.Contains(strings.Join(Names, ","), "ttftaware") {
		t.Error("ttftaware is not among the policy names")
	}
}
