package scoring

import (
	"math"
	"testing"
	"time"
)

func TestPrefillSlowdown(t *testing.T) {
	for _, tt := range []struct {
		name   string
		engine EngineMetrics
		want   float64
	}{
		{"not scraped: 1", EngineMetrics{PrefillSlowdown: 2}, 1},
		{"scraped, not measured: 1", EngineMetrics{Known: true}, 1},
		{"measured", EngineMetrics{Known: true, PrefillSlowdown: 1.3}, 1.3},
		{"a negative reading is not a measurement", EngineMetrics{Known: true, PrefillSlowdown: -1}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := PrefillSlowdown(Candidate{Engine: tt.engine}); got != tt.want {
				t.Fatalf("PrefillSlowdown = %v, want %v", got, tt.want)
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
