package enginemetrics

import (
	"math"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/scoring"
)

// alone is the model's time for a request computing tokens on an engine with nothing
// else on it (scoring.PrefillModel of an idle candidate).
func alone(tokens int) float64 { return scoring.PrefillModel(scoring.Candidate{}, tokens) }

// seconds is s seconds as a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func TestBookedSpeed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	step := func(tokens, admitted int) float64 {
		return scoring.StepCost.Seconds() + float64(tokens)*scoring.TokenCost.Seconds() + float64(admitted)*scoring.AdmitCost.Seconds()
	}
	// one after another: n requests of tokens each, each taking factor times the model,
	// with gap seconds of idle engine between them.
	oneAfterAnother := func(b *BookedSpeed, n, tokens int, factor, gap float64) {
		at := t0
		for range n {
			b.Sent(at)
			at = at.Add(seconds(factor * alone(tokens)))
			b.FirstToken(at, alone(tokens))
			at = at.Add(seconds(gap))
		}
	}
	for _, tt := range []struct {
		name     string
		run      func(b *BookedSpeed)
		min, max float64 // the reading's bounds; 0, 0 is unknown
	}{
		{"nothing seen: unknown", func(*BookedSpeed) {}, 0, 0},
		{"under half a window: unknown", func(b *BookedSpeed) { oneAfterAnother(b, PrefillWindow/2-1, 2000, 1, 0) }, 0, 0},
		{"the model's own speed reads 1", func(b *BookedSpeed) { oneAfterAnother(b, PrefillWindow, 2000, 1, 0) }, 1, 1},
		{"a 1.3x engine reads 1.3, whatever the prompt length", func(b *BookedSpeed) {
			oneAfterAnother(b, PrefillWindow, 300, 1.3, 0)
			oneAfterAnother(b, PrefillWindow, 20000, 1.3, 0)
		}, 1.3, 1.3},
		{"idle time between requests does not count", func(b *BookedSpeed) { oneAfterAnother(b, PrefillWindow, 2000, 1.3, 5) }, 1.3, 1.3},
		{
			// TestPrefillSpeedCountsSharedSteps's schedule, which PrefillSpeed reads 1.9:
			// a long prompt's five 1,648-token chunks, a 400-token turn admitted beside
			// each. The steps are timed once; the model charges each request its own
			// step (five of the ten StepCosts it charges are shared) and weighs the turns' first
			// tokens, which carry the busy time, a little more than the long prompt's: 0.94.
			"short turns sharing a long prompt's steps read about 1 (PrefillSpeed: 1.9)", func(b *BookedSpeed) {
				at := t0
				for range 20 {
					b.Sent(at)
					for s := range 5 {
						b.Sent(at)
						admitted := 1
						if s == 0 {
							admitted = 2
						}
						at = at.Add(seconds(step(2048, admitted)))
						b.FirstToken(at, alone(400))
					}
					b.FirstToken(at, alone(5*1648))
				}
			}, 0.93, 0.97},
		{"a request that never had a first token weighs its time with the next: one request's time twice in a window of about 63", func(b *BookedSpeed) {
			oneAfterAnother(b, PrefillWindow, 2000, 1, 0)
			at := t0.Add(time.Hour)
			b.Sent(at)
			b.Abandoned(at.Add(seconds(alone(2000))))
			b.Sent(at.Add(time.Minute))
			b.FirstToken(at.Add(time.Minute+seconds(alone(2000))), alone(2000))
		}, 1.015, 1.017},
		{"a first token with no request pending changes nothing", func(b *BookedSpeed) {
			oneAfterAnother(b, PrefillWindow, 2000, 1.3, 0)
			b.FirstToken(t0.Add(time.Hour), 1e-9)
		}, 1.3, 1.3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b BookedSpeed
			tt.run(&b)
			if got := b.Slowdown(); got < tt.min-1e-9 || got > tt.max+1e-9 {
				t.Fatalf("Slowdown = %.4f, want within [%v, %v]", got, tt.min, tt.max)
			}
		})
	}
}

// TestBookedSpeedCountsTheMomentOnce: two requests sent together to a 1.3x engine that
// prefills them in one shared stretch: their spans overlap, and the stretch counts once.
func TestBookedSpeedCountsTheMomentOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b BookedSpeed
	at := t0
	for range PrefillWindow {
		b.Sent(at)
		b.Sent(at)
		both := 1.3 * (alone(1000) + alone(1000))
		b.FirstToken(at.Add(seconds(both/2)), alone(1000))
		at = at.Add(seconds(both))
		b.FirstToken(at, alone(1000))
	}
	if got := b.Slowdown(); math.Abs(got-1.3) > 1e-6 {
		t.Fatalf("Slowdown = %v, want 1.3", got)
	}
}
