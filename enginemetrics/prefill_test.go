package enginemetrics

import (
	"math"
	"testing"

	"github.com/loadaware/loadaware-epp/scoring"
)

// modelled is the calibrated model's prefill time for n requests computing tokens each.
func modelled(n, tokens float64) float64 {
	return n * (scoring.AdmitCost.Seconds() + scoring.StepCost.Seconds() +
		tokens*(scoring.TokenCost.Seconds()+scoring.StepCost.Seconds()/scoring.StepTokens))
}

// feed observes, from c on, rounds scrapes of per requests each computing tokens, each
// request taking factor times the model's time; it returns the last counters.
func feed(p *PrefillSpeed, c PrefillCounters, rounds int, per, tokens, factor float64) PrefillCounters {
	for range rounds {
		c.Known = true
		c.Count += per
		c.Computed += per * tokens
		c.Seconds += factor * modelled(per, tokens)
		p.Observe(c)
	}
	return c
}

func TestPrefillSpeed(t *testing.T) {
	for _, tt := range []struct {
		name string
		run  func(p *PrefillSpeed)
		want float64 // the slowdown; 0 is unknown
	}{
		{"nothing seen: unknown", func(*PrefillSpeed) {}, 0},
		{"under half a window: unknown", func(p *PrefillSpeed) { feed(p, PrefillCounters{}, 1+PrefillWindow/2-1, 1, 2000, 1.3) }, 0},
		{"a steady 1.3x engine reads 1.3", func(p *PrefillSpeed) { feed(p, PrefillCounters{}, 1+PrefillWindow, 1, 2000, 1.3) }, 1.3},
		{"the model's own speed reads 1, whatever the prompt length", func(p *PrefillSpeed) {
			c := feed(p, PrefillCounters{}, 1+PrefillWindow, 1, 100, 1)
			feed(p, c, PrefillWindow, 1, 30000, 1)
		}, 1},
		{"unknown counters change nothing", func(p *PrefillSpeed) {
			feed(p, PrefillCounters{}, 1+PrefillWindow, 1, 2000, 1.3)
			p.Observe(PrefillCounters{Seconds: 1e9, Count: 1e9})
		}, 1.3},
		{"counters that go back (a restart) start the window again", func(p *PrefillSpeed) {
			feed(p, PrefillCounters{}, 1+PrefillWindow, 1, 2000, 1.3)
			p.Observe(PrefillCounters{Known: true})
		}, 0},
		{"a scrape with no new request changes nothing", func(p *PrefillSpeed) {
			c := feed(p, PrefillCounters{}, 1+PrefillWindow, 1, 2000, 1.3)
			p.Observe(c)
		}, 1.3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p PrefillSpeed
			tt.run(&p)
			if got := p.Slowdown(); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("Slowdown = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPrefillSpeedForgets(t *testing.T) {
	// An engine that slows from 1x to 2x: after one window the old speed weighs e^-1 of
	// the requests; after five, under 1%.
	var p PrefillSpeed
	c := feed(&p, PrefillCounters{}, 1+5*PrefillWindow, 1, 2000, 1)
	c = feed(&p, c, PrefillWindow, 1, 2000, 2)
	if got, want := p.Slowdown(), 2-math.Exp(-1); math.Abs(got-want) > 0.01 {
		t.Fatalf("one window after the change: %v, want about %v", got, want)
	}
	feed(&p, c, 4*PrefillWindow, 1, 2000, 2)
	if got := p.Slowdown(); math.Abs(got-2) > 0.01 {
		t.Fatalf("five windows after the change: %v, want about 2", got)
	}
}

// TestPrefillSpeedCountsSharedSteps shows what decision 1680 found on seed 20261209 h11:
// vLLM's request_prefill_time_seconds runs from a request's admission to its first token
// over every step it is in, and those steps also carry other requests' work, so the sum
// over requests counts each shared step once per request in it. An engine that runs
// exactly at the model's speed (each step's time is the model's: StepCost, its tokens at
// TokenCost, AdmitCost per admission) reads far slower than 1 when short turns ride along
// a long prompt's chunks, and exactly 1 when the same requests do not share steps.
func TestPrefillSpeedCountsSharedSteps(t *testing.T) {
	const (
		short = 400  // a cached turn's computed tokens
		chunk = 1648 // the long prompt's chunk beside it: the step's 2,048-token budget full
		steps = 5    // the long prompt's chunks: 8,240 tokens
	)
	stepTime := func(tokens, admitted int) float64 {
		return scoring.StepCost.Seconds() + float64(tokens)*scoring.TokenCost.Seconds() + float64(admitted)*scoring.AdmitCost.Seconds()
	}
	for _, tt := range []struct {
		name     string
		shared   bool
		min, max float64 // the reading's bounds
	}{
		// Each step: one short turn admitted (its whole prefill) and one chunk of the
		// long prompt (admitted with the first). The short turn's span is the whole step.
		{"short turns sharing the long prompt's steps: over-read 1.9x", true, 1.85, 1.95},
		// The same requests, each in steps of its own.
		{"the same requests one after another: 1", false, 0.98, 1.0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p PrefillSpeed
			var c PrefillCounters
			for range 20 { // 120 requests: past half a window
				long := 0.0
				for s := range steps {
					admitted := 1
					if s == 0 {
						admitted = 2
					}
					if tt.shared {
						d := stepTime(short+chunk, admitted)
						c.Seconds += d // the short turn's span: the whole step
						long += d
					} else {
						c.Seconds += stepTime(short, 1)
						long += stepTime(chunk, admitted-1)
					}
					c.Count++
					c.Computed += short
				}
				c.Seconds += long
				c.Count++
				c.Computed += steps * chunk
				c.Known = true
				p.Observe(c)
			}
			if got := p.Slowdown(); got < tt.min || got > tt.max {
				t.Fatalf("Slowdown = %.3f on an engine at the model's speed, want within [%v, %v]", got, tt.min, tt.max)
			}
		})
	}
}

// TestPrefillSpeedAge: an idle engine's reading is capped at its peers' highest (dropped
// with no peer measured) once its fleet of engines has had a window's worth of first
// tokens per engine since the engine's last, and only then.
func TestPrefillSpeedAge(t *testing.T) {
	const engines = 6
	window := PrefillWindow * float64(engines)
	for _, tt := range []struct {
		name      string
		factor    float64 // the engine's reading before it idles
		elsewhere float64 // the fleet's first tokens after the engine's last
		busy      bool    // the engine has work at the scrapes after its last first token
		own       bool    // the engine has one more first token halfway
		peers     float64 // the other engines' highest reading
		afresh    float64 // then this many requests at the model's speed
		want      float64 // the slowdown; 0 is unknown
	}{
		{"a window per engine elsewhere, idle: capped at the peers'", 13.87, window, false, false, 2.1, 0, 2.1},
		{"no peer measured: dropped", 13.87, window, false, false, 0, 0, 0},
		{"one first token short: kept", 13.87, window - 1, false, false, 2.1, 0, 13.87},
		{"busy (work queued or running): kept", 13.87, 2 * window, true, false, 2.1, 0, 13.87},
		{"its own first token restarts the count", 13.87, window, false, true, 2.1, 0, 13.87},
		{"a slower GPU reading below its peers: kept", 1.3, 2 * window, false, false, 1.5, 0, 1.3},
		{"capped, then measured: a window later the engine's speed", 13.87, window, false, false, 2.1, 5 * PrefillWindow, 1},
		{"dropped, then measured afresh: the engine's speed, not the burst's", 13.87, window, false, false, 0, PrefillWindow, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p PrefillSpeed
			fleet := 0.0
			c := PrefillCounters{}
			for range 1 + PrefillWindow { // the warm-up: tt.factor times the model
				c = feed(&p, c, 1, 1, 8000, tt.factor)
				fleet += engines
				p.Age(fleet, engines, false, tt.peers)
			}
			for i := 0; i < int(tt.elsewhere); i++ {
				if tt.own && i == int(tt.elsewhere)/2 {
					c = feed(&p, c, 1, 1, 8000, tt.factor)
				}
				fleet++
				p.Age(fleet, engines, !tt.busy, tt.peers)
			}
			for range int(tt.afresh) {
				c = feed(&p, c, 1, 1, 8000, 1)
				fleet += engines
				p.Age(fleet, engines, true, tt.peers)
			}
			if got := p.Slowdown(); math.Abs(got-tt.want) > 0.01 {
				t.Fatalf("Slowdown = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPeersGivesEachEngineTheOthersHighest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		readings []float64
		want     []float64
	}{
		{"empty fleet reads nothing", nil, nil},
		{"none measured", []float64{0, 0}, []float64{0, 0}},
		{"the highest gets the second", []float64{1.2, 3, 1.6}, []float64{3, 1.6, 3}},
		{"a tie at the top: each gets the other", []float64{2, 2, 1}, []float64{2, 2, 2}},
		{"one engine alone has no peer", []float64{13.87}, []float64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Peers[int]
			for i, r := range tc.readings {
				p.Add(i, r)
			}
			for i, want := range tc.want {
				if got := p.Of(i); got != want {
					t.Errorf("engine %d of %v: peers %g, want %g", i, tc.readings, got, want)
				}
			}
		})
	}
}
