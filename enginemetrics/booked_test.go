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
			b.FirstToken(at, at, alone(tokens))
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
						b.FirstToken(at, at, alone(400))
					}
					b.FirstToken(at, at, alone(5*1648))
				}
			}, 0.93, 0.97},
		{"a request that never had a first token weighs its time with the next: one request's time twice in a window of about 63", func(b *BookedSpeed) {
			oneAfterAnother(b, PrefillWindow, 2000, 1, 0)
			at := t0.Add(time.Hour)
			b.Sent(at)
			b.Abandoned(at.Add(seconds(alone(2000))))
			b.Sent(at.Add(time.Minute))
			b.FirstToken(at.Add(time.Minute+seconds(alone(2000))), at.Add(time.Minute+seconds(alone(2000))), alone(2000))
		}, 1.015, 1.017},
		{"a first token with no request pending changes nothing", func(b *BookedSpeed) {
			oneAfterAnother(b, PrefillWindow, 2000, 1.3, 0)
			b.FirstToken(t0.Add(time.Hour), t0.Add(time.Hour), 1e-9)
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
		b.FirstToken(at.Add(seconds(both/2)), at.Add(seconds(both/2)), alone(1000))
		at = at.Add(seconds(both))
		b.FirstToken(at, at, alone(1000))
	}
	if got := b.Slowdown(); math.Abs(got-1.3) > 1e-6 {
		t.Fatalf("Slowdown = %v, want 1.3", got)
	}
}

// Overlap: the spans of the requests awaiting a first token over the time any did. Each
// schedule repeats a pattern of requests (sent and first token, in ms from the pattern's
// start) every period ms for three windows.
func TestBookedSpeedOverlap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type req struct{ sent, first int }
	for _, tt := range []struct {
		name    string
		pattern []req // in order of sending; first tokens in order too
		period  int
		want    float64
	}{
		{"one at a time: 1", []req{{0, 100}}, 100, 1},
		{"idle time between requests does not count", []req{{0, 100}}, 1000, 1},
		{"two sharing the whole stretch: 2", []req{{0, 100}, {0, 100}}, 100, 2},
		{"three in one stretch: 3", []req{{0, 50}, {0, 50}, {0, 50}}, 200, 3},
		{"two half overlapping (busy 150 ms, spans 200 ms): 4/3", []req{{0, 100}, {50, 150}}, 300, 200.0 / 150},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b BookedSpeed
			for k := range 3 * PrefillWindow {
				base := k * tt.period
				// sends before first tokens at the same moment
				sent, first := 0, 0
				for sent < len(tt.pattern) || first < len(tt.pattern) {
					if sent < len(tt.pattern) && (first == len(tt.pattern) || tt.pattern[sent].sent <= tt.pattern[first].first) {
						b.Sent(at(base + tt.pattern[sent].sent))
						sent++
						continue
					}
					r := tt.pattern[first]
					b.FirstToken(at(base+r.sent), at(base+r.first), 0.05)
					first++
				}
			}
			// 2%: a stretch's busy time is weighed with the first of its first tokens, the
			// others' spans a decay step later.
			if got := b.Overlap(); math.Abs(got-tt.want) > 0.02*tt.want {
				t.Fatalf("Overlap = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBookedSpeedOverlapUnknownUntilHalfAWindow(t *testing.T) {
	var b BookedSpeed
	t0 := time.Unix(1000, 0)
	for k := range PrefillWindow {
		if got := b.Overlap(); k < PrefillWindow/2 && got != 0 {
			t.Fatalf("Overlap after %d first tokens = %v, want 0 (unknown)", k, got)
		}
		s := t0.Add(time.Duration(k) * time.Second)
		b.Sent(s)
		b.FirstToken(s, s.Add(100*time.Millisecond), 0.1)
	}
	if got := b.Overlap(); math.Abs(got-1) > 1e-9 {
		t.Fatalf("Overlap after a window = %v, want 1", got)
	}
}

// A request abandoned beside one that takes a second: the busy time is the second's, and
// the abandoned span is not counted.
func TestBookedSpeedOverlapAbandoned(t *testing.T) {
	var b BookedSpeed
	t0 := time.Unix(1000, 0)
	for k := range 3 * PrefillWindow {
		s := t0.Add(time.Duration(k) * 2 * time.Second)
		b.Sent(s)
		b.Sent(s)
		b.Abandoned(s.Add(100 * time.Millisecond))
		b.FirstToken(s, s.Add(time.Second), 1)
	}
	if got := b.Overlap(); math.Abs(got-1) > 1e-9 {
		t.Fatalf("Overlap = %v, want 1", got)
	}
}
