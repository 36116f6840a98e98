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
			// + the rest of the step in progress (half of one) and the step's 2 other tokens streamed first
			0.025 + 2*0.00015 + 1000*198e-6 + 0.019 + 2*0.0005 + (0.019+2*0.0005)/2 + 2*0.00031},
		{"decoding sequences lengthen every step until the first token", 4096, nil,
			[]Candidate{lcand("a:1", 0, 0, 40, 0), lcand("b:1", 0, 0, 10, 0)}, "b:1", ReasonLowestTTFT,
			0.025 + 10*0.00015 + 4096*198e-6 + 2*(0.019+10*0.0005) + (0.019+10*0.0005)/2 + 10*0.00031},
		{"a large decoding batch outweighs one short queued prefill: the step in progress and its streamed tokens", 300, map[string]int{"a:1": 300},
			[]Candidate{lcand("a:1", 0, 1, 0, 0), lcand("b:1", 0, 0, 100, 0)}, "a:1", ReasonLowestTTFT,
			// b: 0.025 + 100 x 0.00015 + 300 tokens + one step of 100 sequences + 0.0345 + 0.031 = 0.234 s
			2*(0.025+0.00015) + 600*198e-6 + 0.019},
		{"equal everything: the smallest address", 1000, nil,
			[]Candidate{lcand("b:1", 500, 1, 4, 0), lcand("a:1", 500, 1, 4, 0)}, "a:1", ReasonLowestTTFT, 0},
		{"equal estimates: the engine with the fewest tokens booked, whose caches hold the least to evict", 1000, map[string]int{"a:1": 5000, "b:1": 3000, "c:1": 1000},
			[]Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0), lcand("c:1", 0, 0, 0, 0)}, "c:1", ReasonLowestTTFT,
			0.025 + 1000*198e-6 + 0.019},
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
	if got := string(te.AppendTerms(nil, Ranked{Estimate: 0.1234, Load: 0.05, QueuedFull: 0.150, Drain: 0.5, KVWait: 0.02, Presumed: 1544, Slowdown: 1.3})); got != " est_ttft=0.123 queued=0.050 queued_full=0.150 drain=0.50 kv_wait=0.020 presumed=1544 slowdown=1.30" {
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

func TestTTFTAwarePresumesTheLastRoute(t *testing.T) {
	const key = 0xabc1
	scraped := func(c Candidate, usage float64) Candidate {
		c.Engine = EngineMetrics{Known: true, KVUsage: usage, Running: 1, KVPoolTokens: 49500}
		return c
	}
	tests := []struct {
		name         string
		routedTokens int // the prompt routed to b:1 before; 0: not known
		since        int // uncached tokens booked on b:1 after it
		key          uint64
		cands        []Candidate
		want         string
		wantPresumed int // b:1's
	}{
		{"the index shows nothing: the last route holds the shorter prompt", 1600, 0, key,
			[]Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "b:1", 1600},
		{"a longer earlier prompt: this whole prompt is presumed", 5000, 0, key,
			[]Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "b:1", 1700},
		{"the index knows part of the prompt: no presumption", 1600, 0, key,
			[]Candidate{lcand("a:1", 256, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "a:1", 0},
		{"a pool's worth allocated since: evicted", 1600, KVPoolTokens, key,
			[]Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "a:1", 0},
		{"less than the pool allocated since: held", 1600, KVPoolTokens - 2000, key,
			[]Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "b:1", 1600},
		{"scraped: the free blocks are the exported pool less its use, 19,800 of 49,500", 1600, 20000, key,
			[]Candidate{scraped(lcand("a:1", 0, 0, 0, 0), 0.6), scraped(lcand("b:1", 0, 0, 0, 0), 0.6)}, "a:1", 0},
		{"scraped: fewer allocated than free: held", 1600, 19000, key,
			[]Candidate{scraped(lcand("a:1", 0, 0, 0, 0), 0.6), scraped(lcand("b:1", 0, 0, 0, 0), 0.6)}, "b:1", 1600},
		{"the routed prompt's length not known (a peer's booking): no presumption", 0, 0, key,
			[]Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "a:1", 0},
		{"no prefix key: no presumption", 1600, 0, 0,
			[]Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}, "a:1", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.Uncached("b:1", 1600)
			st.Routed(key, "b:1", tt.routedTokens, t0)
			st.Uncached("b:1", tt.since)
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 1700, PrefixKey: tt.key, Now: t0.Add(time.Second), Candidates: tt.cands})
			if rs[0].Addr != tt.want {
				t.Fatalf("winner %s, want %s: %+v", rs[0].Addr, tt.want, rs)
			}
			for _, r := range rs {
				want := 0
				if r.Addr == "b:1" {
					want = tt.wantPresumed
				}
				if r.Presumed != want {
					t.Errorf("%s presumed %d, want %d", r.Addr, r.Presumed, want)
				}
			}
			if tt.wantPresumed > 0 {
				if want := 0.025 + float64(1700-tt.wantPresumed)*198e-6 + 0.019; math.Abs(rs[0].Estimate-want) > 1e-9 {
					t.Errorf("holder's estimate %.6f s, want %.6f s (only the unpresumed tokens prefilled)", rs[0].Estimate, want)
				}
			}
		})
	}
}

func TestTTFTAwareChargesNoMoveAgainstAPresumedHolder(t *testing.T) {
	// a:1 holds the 8,000-token prompt, seen in the index or presumed from its last route,
	// behind 4 requests in prefill (2,000 uncached tokens each); b:1 has 1 cached request in
	// prefill. b:1's estimate is the lower (1.710 s against 1.788 s), but a move there is
	// charged the recompute once more for that request: only a seen holding keeps the prompt.
	const key = 0xabc2
	tests := []struct {
		name       string
		matched    int // a:1's in the index
		routed     int // the prompt routed to a:1 before (presumed when nothing is matched)
		prefillA   int
		want       string
		wantReason string
	}{
		{"seen in the index: the holder keeps it", 8000, 8000, 4, "a:1", ReasonHolderSticky},
		{"presumed: the lower estimate wins", 0, 8000, 4, "b:1", ReasonLowestTTFT},
		{"presumed with a short queue: the holder's estimate is the lower", 0, 8000, 1, "a:1", ReasonLowestTTFT},
		{"nothing seen or presumed: the lower estimate wins", 0, 0, 4, "b:1", ReasonLowestTTFT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.Uncached("a:1", 2000)
			st.Uncached("b:1", 0)
			st.Routed(key, "a:1", tt.routed, t0)
			cands := []Candidate{lcand("a:1", tt.matched, tt.prefillA, 0, 0), lcand("b:1", 0, 1, 0, 0)}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 8000, PrefixKey: key, Now: t0.Add(time.Second), Candidates: cands})
			if rs[0].Addr != tt.want || rs[0].Reason != tt.wantReason {
				t.Fatalf("winner %s (%s), want %s (%s): %+v", rs[0].Addr, rs[0].Reason, tt.want, tt.wantReason, rs)
			}
			if tt.matched == 0 && tt.routed > 0 && rs[0].Addr == "a:1" && rs[0].Presumed != tt.routed {
				t.Errorf("a:1 presumed %d, want %d", rs[0].Presumed, tt.routed)
			}
		})
	}
}

func TestTTFTAwarePresumesTheLastTwoEngines(t *testing.T) {
	// The key went to a:1, then b:1, then b:1 again, then c:1 is asked about: a:1 and b:1
	// are presumed to hold it, c:1 not; a:1 after 99,000 uncached tokens booked there, not.
	const key = 0x77
	for _, tt := range []struct {
		name  string
		since int // uncached tokens booked on a:1 after its route
		want  map[string]int
	}{
		{"both routes held", 0, map[string]int{"a:1": 1000, "b:1": 1200, "c:1": 0}},
		{"the earlier route evicted", KVPoolTokens, map[string]int{"a:1": 0, "b:1": 1200, "c:1": 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.Routed(key, "a:1", 1000, t0)
			st.Uncached("a:1", tt.since)
			st.Routed(key, "b:1", 900, t0)
			st.Routed(key, "b:1", 1500, t0)
			cands := []Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0), lcand("c:1", 0, 0, 0, 0)}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 1200, PrefixKey: key, Now: t0, Candidates: cands})
			for _, r := range rs {
				if r.Presumed != tt.want[r.Addr] {
					t.Errorf("%s presumed %d, want %d", r.Addr, r.Presumed, tt.want[r.Addr])
				}
			}
			if rs[0].Addr != "b:1" {
				t.Errorf("winner %s, want b:1 (presumes the most)", rs[0].Addr)
			}
		})
	}
}

func TestTTFTAwarePresumesNothingOfAForgottenEndpoint(t *testing.T) {
	// b:1 took the prompt after 5,000 uncached tokens, left the fleet (Forget) and came back
	// with an empty cache: its count restarts below the route's mark, which holds nothing.
	const key = 0x99
	st := NewState()
	st.Uncached("b:1", 5000)
	st.Routed(key, "b:1", 1600, t0)
	st.Forget([]string{"a:1"})
	st.Uncached("b:1", 100)
	cands := []Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}
	rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 1600, PrefixKey: key, Now: t0, Candidates: cands})
	for _, r := range rs {
		if r.Presumed != 0 {
			t.Errorf("%s presumed %d, want 0", r.Addr, r.Presumed)
		}
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

func TestTTFTAwareReplicatesWhenTheFamilySavesMore(t *testing.T) {
	// a:1 holds the 2,000-token prompt behind one request in prefill (1,000 uncached
	// tokens, est 0.27 s); b:1 holds none of it and has nothing in prefill (est 0.44 s, of
	// which 0.396 s its recompute). Valve (a) charges b:1 nothing more (no queue), so a:1
	// keeps it, unless the copy pays: the fleet's mean queued wait is 0.11 s, a second
	// holder saves each later request of the family half of it (0.056 s), and on an idle
	// fleet with nothing evicted the copy costs 2 x 0.396 s; it pays when 2 x free KV x
	// 0.056 > 0.79 x the tokens booked between two of the family's requests, below about
	// 14,000 with a free 99,000-token pool. A busy fleet (the recompute delays those that
	// arrive during it and the queue behind them) or one whose bookings are recomputes of
	// evicted prompts (the copy's displacement repeats) prices it higher; past the fleet's
	// prefill capacity no copy pays.
	const key = 0x7e91
	tests := []struct {
		name       string
		between    int     // uncached tokens booked on the fleet between the family's two requests; -1: seen once
		kvUsage    float64 // b:1's scraped KV usage; 0: not scraped
		decodeB    int     // b:1's decoding sequences
		others     int     // cached bookings of other prefixes over the 10 s before the family's second request
		evicted    int     // uncached tokens another prefix booked again where it was cached
		matchedB   int     // the prompt's tokens b:1 already holds
		want       string
		wantReason string
	}{
		{"a hot family: the copy pays and the idle engine takes it", 1000, 0, 0, 0, 0, 0, "b:1", ReasonReplica},
		{"a warm family on an idle fleet: the copy pays", 10000, 0, 0, 0, 0, 0, "b:1", ReasonReplica},
		{"a cold family: the copy would be evicted before it pays", 50000, 0, 0, 0, 0, 0, "a:1", ReasonLowestTTFT},
		{"a family seen once: no arrivals measured, no copy", -1, 0, 0, 0, 0, 0, "a:1", ReasonLowestTTFT},
		{"a full pool keeps no copy", 1000, 1, 0, 0, 0, 0, "a:1", ReasonLowestTTFT},
		{"decoding allocates KV too: the copy would be evicted sooner", 1000, 0, 40, 0, 0, 0, "a:1", ReasonLowestTTFT},
		{"a family between hot and warm on a fleet busy a tenth of the time: the copy still pays", 5000, 0, 0, 100, 0, 0, "b:1", ReasonReplica},
		{"the warm family on a fleet busy half the time: the copy's work queues others", 10000, 0, 0, 600, 0, 0, "a:1", ReasonLowestTTFT},
		{"a fleet offered more than it prefills: no copy", 1000, 0, 0, 2000, 0, 0, "a:1", ReasonLowestTTFT},
		{"b:1 holds the prompt's start (a conversation's system prompt): the rest is this request's own, no copy", 1000, 0, 0, 0, 0, 500, "a:1", ReasonLowestTTFT},
		{"the warm family where most bookings recompute evicted prompts: no copy", 10000, 0, 0, 0, 9000, 0, "a:1", ReasonLowestTTFT},
		{"the warm family where some bookings recompute evicted prompts: the copy still pays", 10000, 0, 0, 0, 1000, 0, "b:1", ReasonReplica},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.Uncached("a:1", 1000)
			st.Uncached("b:1", 100)
			st.Routed(key, "a:1", 2000, t0)
			for i := range tt.others {
				st.Uncached("c:1", 0)
				st.Routed(0x1000+uint64(i%64), "c:1", 2000, t0.Add(20*time.Second+time.Duration(i)*10*time.Second/time.Duration(tt.others)))
			}
			if tt.evicted > 0 {
				st.Uncached("c:1", 0)
				st.Routed(0x3000, "c:1", tt.evicted, t0.Add(25*time.Second))
				st.Uncached("c:1", tt.evicted)
				st.Routed(0x3000, "c:1", tt.evicted, t0.Add(26*time.Second))
			}
			if tt.between >= 0 {
				st.Uncached("c:1", tt.between-tt.evicted)
				st.Routed(0x2000, "c:1", 2000, t0.Add(29*time.Second))
				st.Uncached("a:1", 0)
				st.Routed(key, "a:1", 2000, t0.Add(30*time.Second))
			}
			b := lcand("b:1", tt.matchedB, 0, tt.decodeB, 0)
			if tt.kvUsage > 0 {
				b.Engine = EngineMetrics{Known: true, KVUsage: tt.kvUsage}
			}
			cands := []Candidate{lcand("a:1", 2000, 1, 0, 0), b}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 2000, PrefixKey: key, Now: t0.Add(31 * time.Second), Candidates: cands})
			if rs[0].Addr != tt.want || rs[0].Reason != tt.wantReason {
				t.Fatalf("winner %s (%s), want %s (%s): %+v", rs[0].Addr, rs[0].Reason, tt.want, tt.wantReason, rs)
			}
		})
	}
}

func TestTTFTAwareCopiesNothingBeforeItsRateIsMeasured(t *testing.T) {
	// The live demo's start (decision 1660): 16 bookings a second for 2 s, most of them
	// cached (43 uncached tokens each), every eighth one of a hot family held by a:1. a:1
	// holds the family's 1,579-token prompt but for its suffix, behind one request in
	// prefill; b:1 holds none of it and has nothing in prefill. By the copy's price (an
	// idle fleet: busy 0.05, the recompute 0.31 s) a copy on b:1 pays many times over, but
	// that busy is read from a rate decayed over HotTau that has counted 2 s of bookings,
	// a sixth of its window: the fleet is offered six times more. A picker whose first
	// booking is younger than HotTau makes no copy; one that booked once a window before
	// (its rate as low) does.
	const family = 0x7e93
	tests := []struct {
		name       string
		earlier    bool // one booking HotTau before the stream
		want       string
		wantReason string
	}{
		{"a picker started 2 s ago: its offered rate is not measured, no copy", false, "a:1", ReasonLowestTTFT},
		{"a picker that booked once HotTau before: the copy", true, "b:1", ReasonReplica},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			if tt.earlier {
				st.Uncached("c:1", 0)
				st.Routed(0x9999, "c:1", 100, t0.Add(-HotTau))
			}
			for i := range 32 {
				now := t0.Add(time.Duration(i) * time.Second / 16)
				key, addr := uint64(0x100+i), []string{"a:1", "b:1"}[i%2]
				if i%8 == 0 {
					key, addr = family, "a:1"
				}
				st.Uncached(addr, 43)
				st.Routed(key, addr, 1579, now)
			}
			cands := []Candidate{lcand("a:1", 1536, 1, 10, 0), lcand("b:1", 0, 0, 10, 0)}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 1579, PrefixKey: family, Now: t0.Add(2 * time.Second), Candidates: cands})
			if rs[0].Addr != tt.want || rs[0].Reason != tt.wantReason {
				t.Fatalf("winner %s (%s), want %s (%s): %+v", rs[0].Addr, rs[0].Reason, tt.want, tt.wantReason, rs)
			}
		})
	}
}

// between is the key's spacing as TTFTAware.Rank reads it.
func between(st *State, key uint64) (float64, float64) {
	r, ok := st.recent[key]
	return spacing(r, ok)
}

func TestStateBetweenAFamilysRequests(t *testing.T) {
	st := NewState()
	const key = 0x51
	if b, _ := between(st, key); b != -1 {
		t.Fatalf("unseen key: between %v, want -1", b)
	}
	st.Uncached("a:1", 500)
	st.Routed(key, "a:1", 100, t0)
	if b, _ := between(st, key); b != -1 {
		t.Fatalf("seen once: between %v, want -1", b)
	}
	st.Uncached("b:1", 1600)
	st.Routed(key, "b:1", 100, t0.Add(4*time.Second))
	if b, g := between(st, key); b != 1600 || g != 4 {
		t.Fatalf("seen twice: between %v, gap %v, want 1600, 4", b, g)
	}
	st.Routed(key, "a:1", 100, t0.Add(6*time.Second))
	want, wantGap := 1600+(0-1600)/float64(UncachedMemory), 4+(2-4)/float64(UncachedMemory)
	if b, g := between(st, key); math.Abs(b-want) > 1e-9 || math.Abs(g-wantGap) > 1e-9 {
		t.Fatalf("seen thrice: between %v, gap %v, want %v, %v", b, g, want, wantGap)
	}
}

func TestStateOfferedLoad(t *testing.T) {
	tau := HotTau.Seconds()
	tests := []struct {
		name       string
		bookings   int // one every gap, each with tokens uncached tokens
		gap        time.Duration
		tokens     int
		wantRate   float64 // as of the last booking
		wantTokens float64
	}{
		{"none booked", 0, time.Second, 0, 0, 0},
		{"one booking", 1, time.Second, 300, 1 / tau, 300},
		{"a steady stream of 4 a second approaches 4", 400, 250 * time.Millisecond, 100,
			(1 - math.Exp(-400*0.25/tau)) / (1 - math.Exp(-0.25/tau)) / tau, 100},
		{"cached prompts book no tokens", 20, time.Second, 0, (1 - math.Exp(-20/tau)) / (1 - math.Exp(-1/tau)) / tau, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			var now time.Time
			for i := range tt.bookings {
				now = t0.Add(time.Duration(i) * tt.gap)
				st.Uncached("a:1", tt.tokens)
				st.Routed(uint64(1+i%7), "a:1", 1000, now)
			}
			st.mu.Lock()
			rate, per, _ := st.offered(now)
			st.mu.Unlock()
			if math.Abs(rate-tt.wantRate) > 1e-9 || math.Abs(per-tt.wantTokens) > 1e-6 {
				t.Fatalf("offered %v/s of %v tokens each, want %v/s of %v", rate, per, tt.wantRate, tt.wantTokens)
			}
		})
	}
	st := NewState()
	st.Uncached("a:1", 100)
	st.Routed(1, "a:1", 1000, t0)
	st.mu.Lock()
	rate, _, _ := st.offered(t0.Add(HotTau))
	st.mu.Unlock()
	if want := math.Exp(-1) / tau; math.Abs(rate-want) > 1e-12 {
		t.Errorf("a booking HotTau ago: rate %v, want %v (decayed by e)", rate, want)
	}
}

func TestStateEvictedShare(t *testing.T) {
	// A key's prompt booked where the key was last routed (or the route before), with more
	// uncached tokens than the least the key ever booked, was evicted there: the excess
	// counts as recomputed after an eviction; booked anywhere else it is a move, not counted.
	tests := []struct {
		name  string
		addrs []string // where the key's bookings go, in turn
		toks  []int    // their uncached tokens
		want  float64  // evicted share of the uncached tokens (all booked at one instant)
	}{
		{"cached again where it was: nothing evicted", []string{"a:1", "a:1"}, []int{300, 300}, 0},
		{"recomputed where it was", []string{"a:1", "a:1"}, []int{300, 1300}, 1000.0 / 1600},
		{"recomputed on another engine: a move", []string{"a:1", "b:1"}, []int{300, 1300}, 0},
		{"back on the route before", []string{"a:1", "b:1", "a:1"}, []int{300, 1300, 1300}, 1000.0 / 2900},
		{"its own suffix only", []string{"a:1", "a:1", "a:1"}, []int{300, 100, 100}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			for i, a := range tt.addrs {
				st.Uncached(a, tt.toks[i])
				st.Routed(0x44, a, 2000, t0)
			}
			st.mu.Lock()
			_, _, got := st.offered(t0)
			st.mu.Unlock()
			if math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("evicted share %v, want %v", got, tt.want)
			}
		})
	}
}

// prompt returns n token ids: the first shared of them a family's (1, 2, ...), the rest
// this request's own (from own on).
func prompt(n, shared int, own uint32) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(i + 1)
		if i >= shared {
			p[i] = own + uint32(i)
		}
	}
	return p
}

func TestTTFTAwareCopiesOverAPresumedHolderOnlyForARepeat(t *testing.T) {
	// The index shows nothing (no CPU tier); the prefix key went to a:1 twice, 30 s apart,
	// with 1,000 uncached tokens booked between, the last time a 2,000-token prompt
	// (previous). a:1, presumed to hold it, has one request in prefill; b:1 is idle and
	// holds nothing. As when the holding is seen (TestTTFTAwareReplicatesWhenTheFamilySavesMore),
	// a hot family's copy on b:1 pays, but a presumed holding admits it only when this
	// prompt is known to be another request of the family, not the next turn of the
	// previous prompt's session.
	const key = 0x7e92
	previous := prompt(2000, 1800, 1<<20)
	tests := []struct {
		name       string
		prompt     []uint32 // this request's tokens
		tokens     bool     // handed to the policy (NeedsTokens)
		recorded   bool     // the previous prompt's tokens recorded (RoutedPrompt; else Routed)
		want       string
		wantReason string
	}{
		{"a repeat of the family's 1,800-token prefix: the copy pays", prompt(2000, 1800, 2<<20), true, true, "b:1", ReasonReplica},
		{"the same prompt again: a repeat", previous, true, true, "b:1", ReasonReplica},
		{"a shorter repeat", prompt(1900, 1800, 2<<20), true, true, "b:1", ReasonReplica},
		{"the previous prompt's next turn: its history lives on a:1", append(append([]uint32{}, previous...), prompt(300, 0, 3<<20)...), true, true, "a:1", ReasonLowestTTFT},
		{"this prompt's tokens not handed over: no copy", prompt(2000, 1800, 2<<20), false, true, "a:1", ReasonLowestTTFT},
		{"the previous prompt's tokens not recorded: no copy", prompt(2000, 1800, 2<<20), true, false, "a:1", ReasonLowestTTFT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.Uncached("a:1", 1000)
			st.Uncached("b:1", 100)
			st.RoutedPrompt(key, "a:1", previous, t0)
			st.Uncached("c:1", 1000)
			st.Routed(0x2000, "c:1", 2000, t0.Add(29*time.Second))
			st.Uncached("a:1", 0)
			if tt.recorded {
				st.RoutedPrompt(key, "a:1", previous, t0.Add(30*time.Second))
			} else {
				st.Routed(key, "a:1", len(previous), t0.Add(30*time.Second))
			}
			in := Input{PromptTokens: len(tt.prompt), PrefixKey: key, Now: t0.Add(31 * time.Second),
				Candidates: []Candidate{lcand("a:1", 0, 1, 0, 0), lcand("b:1", 0, 0, 0, 0)}}
			if tt.tokens {
				in.Tokens = tt.prompt
			}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(in)
			if rs[0].Addr != tt.want || rs[0].Reason != tt.wantReason {
				t.Fatalf("winner %s (%s), want %s (%s): %+v", rs[0].Addr, rs[0].Reason, tt.want, tt.wantReason, rs)
			}
			want := min(len(previous), len(tt.prompt))
			if tt.tokens && !tt.recorded {
				want = 1792 // the first route's chunks: the family's 1,800 tokens' seven full ones
			}
			if a := rs[0]; a.Addr == "a:1" && a.Presumed != want {
				t.Errorf("a:1 presumed %d, want %d", a.Presumed, want)
			}
		})
	}
}

// familyOnA is a State where the family key sent a 2,000-token prompt to a:1 at t0 and
// again 30 s later, between uncached tokens booked on c:1 in between (a:1 1,000 tokens
// before, b:1 100).
func familyOnA(key uint64, between int) *State {
	st := NewState()
	st.Uncached("a:1", 1000)
	st.Uncached("b:1", 100)
	st.Routed(key, "a:1", 2000, t0)
	st.Uncached("c:1", between)
	st.Routed(0x2000, "c:1", 2000, t0.Add(29*time.Second))
	st.Uncached("a:1", 0)
	st.Routed(key, "a:1", 2000, t0.Add(30*time.Second))
	return st
}

func TestTTFTAwareCopiesOntoAFasterEngine(t *testing.T) {
	// a:1 holds the family's 2,000-token prompt and has nothing queued, so a second holder
	// saves no queued wait; b:1 holds none of it. What a copy on b:1 still buys each later
	// request of the family is its speed (decision 1704): a hit is one admission and one
	// step, 0.044 s at slowdown 1, 0.070 s at 1.6. The recompute (0.396 s at slowdown 1) and
	// the blocks it evicts cost about 0.8 s; over a free 99,000-token pool on two engines
	// the copy pays when 2 x 99,000 x (holder's hit - copy's hit) > 0.8 x the tokens booked
	// between two of the family's requests: below about 6,500 tokens from a 1.6x holder to
	// a 1x engine. A copy onto an engine no faster saves nothing. A session's later turn
	// (a:1 holds 2,400 of its 2,600 tokens, its history past the family's shortest prompt)
	// is not copied: its move would recompute the history, which only the session's own
	// later turns share (decisions 1716, 1720); a first turn held no further than the
	// family's prompt still is.
	const key = 0x7e95
	tests := []struct {
		name       string
		slowA      float64 // the holder's prefill slowdown
		slowB      float64 // the other engine's
		between    int     // uncached tokens booked on the fleet between the family's two requests
		prompt     int     // the request's prompt tokens
		held       int     // of them a:1 holds
		want       string
		wantReason string
	}{
		{"the holder is 1.6x, the other 1x: the copy pays by speed alone", 1.6, 1, 1000, 2000, 2000, "b:1", ReasonReplica},
		{"the same, but the copy would be evicted before it pays", 1.6, 1, 50000, 2000, 2000, "a:1", ReasonLowestTTFT},
		{"equal speeds and no queue: nothing to save", 1, 1, 1000, 2000, 2000, "a:1", ReasonLowestTTFT},
		{"the other engine is the slower: nothing to save", 1, 1.6, 1000, 2000, 2000, "a:1", ReasonLowestTTFT},
		{"a first turn held no further than the family's prompt: the copy pays", 1.6, 1, 1000, 2200, 2000, "b:1", ReasonReplica},
		{"a session's later turn, held past the family's shortest prompt: no copy", 1.6, 1, 1000, 2600, 2400, "a:1", ReasonLowestTTFT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := familyOnA(key, tt.between)
			a := lcand("a:1", tt.held, 0, 0, 0)
			a.Engine = EngineMetrics{Known: true, PrefillSlowdown: tt.slowA}
			b := lcand("b:1", 0, 0, 0, 0)
			b.Engine = EngineMetrics{Known: true, PrefillSlowdown: tt.slowB}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: tt.prompt, PrefixKey: key, Now: t0.Add(31 * time.Second), Candidates: []Candidate{a, b}})
			if rs[0].Addr != tt.want || rs[0].Reason != tt.wantReason {
				t.Fatalf("winner %s (%s), want %s (%s): %+v", rs[0].Addr, rs[0].Reason, tt.want, tt.wantReason, rs)
			}
		})
	}
}

func TestTTFTAwareReportsAReferencedCopy(t *testing.T) {
	// A family every 30 s on two engines of one speed, each decoding for 90 s: 3 of its
	// sequences run at once, enough to keep a second holder referenced and to move one or
	// more off a:1. With a:1 running 6 sequences and b:1 none, the copy onto b:1 is the
	// referenced copy of decision 1732, reported under its own reason (replicaPays alone
	// finds nothing to save: no queue, equal speeds). With a:1 running 2, it is not busier
	// than b:1 by the family's share, and a:1 keeps the family. Where b:1 is so slow that
	// even the copy's score loses, a:1 keeps it and the decision has one reason.
	const key = 0x7e96
	tests := []struct {
		name       string
		heldDecode int     // sequences a:1 runs
		slowB      float64 // b:1's prefill slowdown (0: 1)
		want       string
		wantReason string
	}{
		{"the holder runs the family's share more: the referenced copy", 6, 0, "b:1", ReasonReferencedCopy},
		{"the holder runs less than the family's share more: no copy", 2, 0, "a:1", ReasonLowestTTFT},
		{"a copy onto an engine 8x slower passes the tests but loses on its estimate", 6, 8, "a:1", ReasonLowestTTFT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := familyOnA(key, 1000)
			a := lcand("a:1", 2000, 0, tt.heldDecode, 90*time.Second)
			a.Engine = EngineMetrics{Known: true}
			b := lcand("b:1", 0, 0, 0, 90*time.Second)
			b.Engine = EngineMetrics{Known: true, PrefillSlowdown: tt.slowB}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 2000, PrefixKey: key, Now: t0.Add(31 * time.Second), Candidates: []Candidate{a, b}})
			if rs[0].Addr != tt.want || rs[0].Reason != tt.wantReason {
				t.Fatalf("winner %s (%s), want %s (%s): %+v", rs[0].Addr, rs[0].Reason, tt.want, tt.wantReason, rs)
			}
			for _, r := range rs {
				if r.Reason != rs[0].Reason {
					t.Fatalf("%s reports %q beside the winner's %q: one reason a decision", r.Addr, r.Reason, rs[0].Reason)
				}
			}
		})
	}
}

func TestReferencedCopy(t *testing.T) {
	// h05's shape (decision 1732): a family every 1.6 s, decoding 7.5 s, keeps about 4.7
	// of its sequences running at once; its one holder runs 10 sequences (two families),
	// the candidate 5 (one). A 28,160-token pool, a fifth used, takes the 3,184-token
	// recompute with the tokens booked between the family's visits to spare.
	pool := EngineMetrics{Known: true, KVUsage: 0.2, KVPoolTokens: 28160}
	tests := []struct {
		name       string
		between    float64 // uncached tokens booked on the fleet between two of the family's requests
		gap        float64 // seconds between two of the family's requests
		pace       time.Duration
		holders    int
		decode     int     // the candidate's sequences decoding
		heldDecode float64 // the least busy holder's
		engine     EngineMetrics
		want       bool
	}{
		{"a double holder relieved onto a single one", 6000, 1.6, 7500 * time.Millisecond, 1, 5, 10, pool, true},
		{"a holder with the family alone: no busier than the candidate by its share", 6000, 1.6, 7500 * time.Millisecond, 1, 5, 5, pool, false},
		{"a holder busier by less than the family's share", 6000, 1.6, 7500 * time.Millisecond, 1, 5, 9, pool, false},
		{"a rare family: too few sequences to keep a second holder referenced", 6000, 20, 7500 * time.Millisecond, 1, 0, 10, pool, false},
		{"a third holder would move under one of the family's sequences (4.7 / 6)", 6000, 1.6, 7500 * time.Millisecond, 2, 0, 20, pool, false},
		{"a third holder for a family of 7.5: 1.25 of its sequences move", 6000, 1, 7500 * time.Millisecond, 2, 0, 20, pool, true},
		{"the family would keep under one sequence on each of five holders", 6000, 1.6, 7500 * time.Millisecond, 4, 0, 10, pool, false},
		{"the family seen once", -1, 1.6, 7500 * time.Millisecond, 1, 5, 10, pool, false},
		{"the candidate's pace not measured", 6000, 1.6, 0, 1, 5, 10, pool, false},
		{"a nearly full pool: the recompute does not fit", 6000, 1.6, 7500 * time.Millisecond, 1, 5, 10, EngineMetrics{Known: true, KVUsage: 0.9, KVPoolTokens: 28160}, false},
		{"the candidate's bookings between the family's visits would fill what is left", 80000, 1.6, 7500 * time.Millisecond, 1, 5, 10, pool, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := lcand("b:1", 0, 0, tt.decode, tt.pace)
			c.Engine = tt.engine
			if got := referencedCopy(c, tt.between, tt.gap, 8, tt.holders, 3184, tt.heldDecode); got != tt.want {
				t.Fatalf("referencedCopy = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTTFTAwareCopyFitsBesideRouted(t *testing.T) {
	// A fleet without KV events (no CPU tier): the picker's chunk LRU counts the distinct
	// prompt tokens routed to b:1. A 3,184-token copy fits a 28,160-token pool beside
	// 20,000 of them, not beside 26,000 (it would evict a family's prefix, computed again
	// from nothing when it returns); where no LRU is kept, or the index has shown holdings,
	// an evicted prefix reloads from the CPU tier and the check passes.
	engine := EngineMetrics{Known: true, KVPoolTokens: 28160}
	tests := []struct {
		name    string
		routed  int  // distinct prompt tokens routed to b:1, in 2,000-token prompts
		indexed bool // the index has shown a holding
		want    bool
	}{
		{"room beside what was routed", 20000, false, true},
		{"the copy would evict a routed family", 26000, false, false},
		{"nothing routed there yet: no LRU", 0, false, true},
		{"the index sees the holdings", 26000, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.mu.Lock()
			for i := 0; i < tt.routed/2000; i++ {
				prompt := make([]uint32, 2000)
				for j := range prompt {
					prompt[j] = uint32(i*2000 + j + 1)
				}
				st.recordChunks(uint64(0x100+i), "b:1", prompt)
			}
			st.indexed = tt.indexed
			st.mu.Unlock()
			c := lcand("b:1", 0, 0, 0, 0)
			c.Engine = engine
			if got := st.fitsBesideRouted(c, 3184); got != tt.want {
				t.Fatalf("fitsBesideRouted = %v, want %v", got, tt.want)
			}
		})
	}
}
