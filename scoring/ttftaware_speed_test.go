package scoring

import (
	"math"
	"testing"
	"time"
)

func TestPrefillSlowdown(t *testing.T) {
	scraped := func(v float64) EngineMetrics { return EngineMetrics{Known: true, PrefillSlowdown: v} }
	for _, tt := range []struct {
		name            string
		booked, overlap float64 // Candidate.PrefillBooked, PrefillOverlap
		engine          EngineMetrics
		want            float64
	}{
		{"not scraped, not booked: 1", 0, 0, EngineMetrics{PrefillSlowdown: 2}, 1},
		{"scraped, not measured: 1", 0, 0, EngineMetrics{Known: true}, 1},
		{"scraped only", 0, 0, scraped(1.3), 1.3},
		{"a negative reading is not a measurement", -1, -1, scraped(-1), 1},
		{"booked only (not scraped)", 1.2, 1.5, EngineMetrics{}, 1.2},
		{"booked only (scraped, not measured)", 1.2, 0, EngineMetrics{Known: true}, 1.2},
		{"scraped and an overlap, nothing booked: the scraped", 0, 2, scraped(2.6), 2.6},
		{"booked within the bounds: booked", 1.3, 2, scraped(2.2), 1.3},
		{"booked under scraped / overlap (a CPU-tier hit taken for a miss): the lower bound", 0.85, 1.02, scraped(1.02), 1},
		{"booked over the scraped (a prompt believed cached, computed): the scraped", 3.6, 1.1, scraped(1.5), 1.5},
		{"booked, no overlap measured: at most the scraped", 0.8, 0, scraped(1.1), 1.1},
		{"an overlap under 1 is not a measurement", 0.8, 0.5, scraped(1.1), 1.1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Candidate{PrefillBooked: tt.booked, PrefillOverlap: tt.overlap, Engine: tt.engine}
			if got := PrefillSlowdown(c); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("PrefillSlowdown = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPrefillModel(t *testing.T) {
	tok, step, seq := TokenCost.Seconds(), StepCost.Seconds(), SeqStepCost.Seconds()
	admit := func(seqs int) float64 { return AdmitCost.Seconds() + float64(seqs)*AdmitSeqCost.Seconds() }
	for _, tt := range []struct {
		name     string
		c        Candidate
		uncached int
		want     float64
	}{
		{"alone: its own steps, as est charges it", Candidate{}, 3000, admit(0) + 3000*tok + 2*step},
		{"alone, nothing to compute: one step", Candidate{}, 0, admit(0) + step},
		{"alone, its steps carry the decoding sequences", Candidate{Decode: 10}, 400, admit(10) + 400*tok + (step + 10*seq)},
		{"three in prefill beside a short prompt: a quarter of a step", Candidate{Prefill: 3, Decode: 10}, 400, admit(13) + 400*tok + (step+10*seq)/4},
		{"beside others, a long prompt: its tokens' share of the steps", Candidate{Prefill: 1}, 3072, admit(1) + 3072*tok + 1.5*step},
		{"a negative count is none", Candidate{Prefill: -2, Decode: -1}, -5, admit(0) + step},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := PrefillModel(tt.c, tt.uncached); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("PrefillModel = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTTFTAwareScalesPrefillBySlowdown(t *testing.T) {
	// Two idle engines, neither holding the prompt: the measured 1.3x engine's estimate is
	// 1.3 times the other's, so the other wins; unmeasured, they tie and the smaller
	// address wins. A KV wait is not scaled.
	fast := lcand("b:1", 0, 0, 0, 0)
	slow := lcand("a:1", 0, 0, 0, 0)
	fast.Engine = EngineMetrics{Known: true, PrefillSlowdown: 1}
	slow.Engine = EngineMetrics{Known: true, PrefillSlowdown: 1.3}
	unmeasured := slow
	unmeasured.Engine = EngineMetrics{Known: true}
	full := slow
	full.DecodePace, full.Decode, full.Engine = 100*time.Second, 10, EngineMetrics{Known: true, PrefillSlowdown: 1.3, KVUsage: 1, Running: 10}
	for _, tt := range []struct {
		name  string
		cands []Candidate
		want  string
		ratio float64 // a:1's estimate, its KV wait aside, over b:1's
	}{
		{"the slow engine loses", []Candidate{slow, fast}, "b:1", 1.3},
		{"unmeasured: a tie", []Candidate{unmeasured, fast}, "a:1", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustNew(t, "ttftaware", DefaultParams(), NewState()).Rank(Input{PromptTokens: 2000, Now: t0, Candidates: tt.cands})
			if rs[0].Addr != tt.want {
				t.Fatalf("winner %s, want %s: %+v", rs[0].Addr, tt.want, rs)
			}
			byAddr := map[string]Ranked{rs[0].Addr: rs[0], rs[1].Addr: rs[1]}
			if got := (byAddr["a:1"].Estimate - byAddr["a:1"].KVWait) / byAddr["b:1"].Estimate; math.Abs(got-tt.ratio) > 1e-9 {
				t.Fatalf("estimate ratio %v, want %v: %+v", got, tt.ratio, rs)
			}
			if byAddr["a:1"].Slowdown != tt.ratio {
				t.Fatalf("explained slowdown %v, want %v", byAddr["a:1"].Slowdown, tt.ratio)
			}
		})
	}
	t.Run("the KV wait is not scaled", func(t *testing.T) {
		rs := mustNew(t, "ttftaware", DefaultParams(), NewState()).Rank(Input{PromptTokens: 2000, Now: t0, Candidates: []Candidate{full}})
		if want := KVWait(full, 2000, 1); want <= 0 || math.Abs(rs[0].KVWait-want) > 1e-9 {
			t.Fatalf("KV wait %v, want KVWait's %v (positive)", rs[0].KVWait, want)
		}
	})
}
