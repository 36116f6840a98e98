package scoring

import (
	"math"
	"testing"
	"time"
)

// drainAt reads addr's pending bookings with prefill of them still in prefill at now.
func drainAt(st *State, addr string, prefill int, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.drain(addr, prefill, now)
}

func TestTTFTAwareAgesTheQueue(t *testing.T) {
	// Both engines have one request of their mean 4,000 uncached tokens in prefill, charged
	// in full 25.15 ms + 4,000 x 0.198 ms = 0.81715 s. b:1's is its newest booking, made
	// booked seconds before the decision with its first token predicted predicted seconds
	// after; an earlier booking there took observed seconds to its first token against
	// 2 s predicted (0: none has had it yet).
	const full = 0.025 + 0.00015 + 4000*198e-6
	tests := []struct {
		name                        string
		observed, booked, predicted float64
		want                        string
		wantLoad, wantDrain         float64 // b:1's charged queue and drain ratio
	}{
		{"an engine draining in half its predicted time: the prediction halved, less the booking's age", 1, 0.1, 0.8, "b:1", 0.8*0.5 - 0.1, 0.5},
		{"an engine draining past its aged prediction: nothing queued", 1, 1, 0.8, "b:1", 0, 0.5},
		{"an engine draining 3x slower than predicted: the full charge, never more", 6, 0.1, 0.8, "a:1", full, 3},
		{"an engine draining slower than predicted (1.2x): the full charge, though the aged prediction is less", 2.4, 0.5, 0.5, "a:1", full, 1.2},
		{"an engine draining exactly as predicted: the full charge", 2, 0.5, 0.5, "a:1", full, 1},
		{"no first token observed yet: the full charge", 0, 0.1, 0.8, "a:1", full, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.Uncached("a:1", 4000)
			st.Uncached("b:1", 4000)
			if tt.observed > 0 {
				st.Pending("b:1", t0.Add(-20*time.Second), 2)
				drainAt(st, "b:1", 0, t0.Add(-20*time.Second+time.Duration(tt.observed*float64(time.Second))))
			}
			st.Pending("b:1", t0.Add(-time.Duration(tt.booked*float64(time.Second))), tt.predicted)
			cands := []Candidate{lcand("a:1", 0, 1, 0, 0), lcand("b:1", 0, 1, 0, 0)}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 1000, Now: t0, Candidates: cands})
			if rs[0].Addr != tt.want {
				t.Fatalf("winner %s, want %s: %+v", rs[0].Addr, tt.want, rs)
			}
			for _, r := range rs {
				load, drain := full, 0.0
				if r.Addr == "b:1" {
					load, drain = tt.wantLoad, tt.wantDrain
				}
				if math.Abs(r.Load-load) > 1e-9 || math.Abs(r.Drain-drain) > 1e-9 {
					t.Errorf("%s: queued %.6f s, drain %.3f; want %.6f s, %.3f", r.Addr, r.Load, r.Drain, load, drain)
				}
				if math.Abs(r.FullEstimate()-r.Estimate-(full-r.Load)) > 1e-9 {
					t.Errorf("%s: estimate in full %.6f s, capped %.6f s; want them %.6f s apart", r.Addr, r.FullEstimate(), r.Estimate, full-r.Load)
				}
			}
		})
	}
}

func TestStatePendingRing(t *testing.T) {
	st := NewState()
	// pendingSlots + 6 bookings a second apart, each predicted 1 s: the first 6 are dropped.
	for i := range pendingSlots + 6 {
		st.Pending("a:1", t0.Add(time.Duration(i)*time.Second), 1)
	}
	r := st.pending["a:1"]
	if r.n != pendingSlots || r.lost != 6 {
		t.Fatalf("kept %d, lost %d; want %d, 6", r.n, r.lost, pendingSlots)
	}
	// 10 have had their first token: the 6 dropped (no observation), then bookings 6-9.
	now := t0.Add(100 * time.Second)
	st.mu.Lock()
	at, pred, ratio, ok, measured := st.drain("a:1", pendingSlots-4, now)
	st.mu.Unlock()
	if r.lost != 0 || r.n != pendingSlots-4 {
		t.Fatalf("kept %d, lost %d after the drain; want %d, 0", r.n, r.lost, pendingSlots-4)
	}
	if want := (94 + 93 + 92 + 91) / 4.0; !measured || math.Abs(ratio-want) > 1e-9 {
		t.Errorf("ratio %v (measured %v), want %v", ratio, measured, want)
	}
	if want := t0.Add((pendingSlots + 5) * time.Second); !ok || !at.Equal(want) || pred != 1 {
		t.Errorf("newest pending %v, %v s (%v); want %v, 1 s", at, pred, ok, want)
	}
	// Reading it again at the same count changes nothing.
	drainAt(st, "a:1", pendingSlots-4, now.Add(time.Second))
	if r.n != pendingSlots-4 || r.obs != 94+93+92+91 {
		t.Errorf("a second read drained again: kept %d, observed %v s", r.n, r.obs)
	}
	st.Forget([]string{"b:1"})
	if _, ok := st.pending["a:1"]; ok {
		t.Error("Forget kept a:1's pending bookings")
	}
}
