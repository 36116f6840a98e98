package scoring

import (
	"math"
	"testing"
	"time"
)

func TestKVDrain(t *testing.T) {
	for _, tt := range []struct {
		name          string
		pace          time.Duration
		active, fresh int
		pool          int // Engine.KVPoolTokens; 0: not exported
		want          float64
	}{
		{"the blocks in flight drain in their share of the pace", 10 * time.Second, 1000, 500, 32000, 10 * 1500 * 16 / 32000.0},
		{"nothing in flight: the prompt's own blocks", 10 * time.Second, 0, 100, 32000, 10 * 100 * 16 / 32000.0},
		{"a pool not exported is the A10's", 9900 * time.Millisecond, 0, 100, 0, 9.9 * 1600 / 99000.0},
		{"no measured pace: nothing", 0, 1000, 500, 32000, 0},
		{"negative counts are none", 10 * time.Second, -5, -5, 32000, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Candidate{DecodePace: tt.pace, ActiveBlocks: tt.active, NewBlocks: tt.fresh,
				Engine: EngineMetrics{Known: true, KVPoolTokens: tt.pool}}
			if got := kvDrain(c); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("kvDrain = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTTFTAwareKVBoundFloor(t *testing.T) {
	// Two engines with full KV pools: every candidate is saturated. a:1 holds 500 more of
	// the prompt; b:1 has far fewer blocks in flight.
	full := func(addr string, matched, active, prefill int) Candidate {
		c := lcand(addr, matched, prefill, 2, 10*time.Second)
		c.ActiveBlocks, c.NewBlocks = active, (12000-matched)/16
		c.Engine = EngineMetrics{Known: true, KVUsage: 1, Running: 2, KVPoolTokens: 32000}
		return c
	}
	for _, tt := range []struct {
		name     string
		uncached int // State.Uncached on each before the decision: the prefill queued there
		booked   int // 12,000-token bookings of other prefixes at t0 before it: the offered rate
		cands    []Candidate
		want     string
	}{
		{"KV-bound: the fewer blocks in flight win over a little more held",
			0, 0, []Candidate{full("a:1", 11500, 3000, 0), full("b:1", 11000, 500, 0)}, "b:1"},
		{"KV-bound but past the fleet's prefill capacity: the least miss, whatever the KV",
			0, 40, []Candidate{full("a:1", 11500, 3000, 0), full("b:1", 11000, 500, 0)}, "a:1"},
		{"KV-bound, as many blocks in flight: the more held wins",
			0, 0, []Candidate{full("a:1", 11500, 500, 0), full("b:1", 11000, 500, 0)}, "a:1"},
		{"compute-bound (a step of prefill queued everywhere): the least miss, whatever the KV",
			3000, 0, []Candidate{full("a:1", 11500, 3000, 1), full("b:1", 11000, 500, 1)}, "a:1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			if tt.uncached > 0 {
				for _, c := range tt.cands {
					st.Uncached(c.Addr, tt.uncached)
				}
			}
			for i := range tt.booked {
				st.Uncached("c:1", 12000)
				st.Routed(uint64(1000+i), "c:1", 12000, t0)
			}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 12000, Now: t0, Candidates: tt.cands})
			for _, r := range rs {
				if r.KVWait <= 0 {
					t.Fatalf("%s has no KV wait: the fleet is not saturated, the test is void: %+v", r.Addr, rs)
				}
			}
			if rs[0].Addr != tt.want {
				t.Fatalf("winner %s, want %s: %+v", rs[0].Addr, tt.want, rs)
			}
			for _, r := range rs {
				c := tt.cands[0]
				if r.Addr == tt.cands[1].Addr {
					c = tt.cands[1]
				}
				if want := kvDrain(c); tt.uncached == 0 && tt.booked == 0 && math.Abs(r.Drain-want) > 1e-9 {
					t.Errorf("%s explained drain %v, want kvDrain's %v", r.Addr, r.Drain, want)
				}
				if (tt.uncached > 0 || tt.booked > 0) && r.Drain != 0 {
					t.Errorf("%s explained drain %v outside the KV-bound floor, want 0", r.Addr, r.Drain)
				}
			}
		})
	}
}
