package fleet

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHealthTransitions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at      time.Duration
		active  bool // else passive
		ok      bool
		healthy bool // expected Healthy after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one failed check is not enough", []step{{0, true, false, true}, {1, true, true, true}, {2, true, false, true}}},
		{"two failed checks eject, two passed ones bring back", []step{
			{0, true, false, true}, {1, true, false, false}, {2, true, true, false}, {3, true, true, true}}},
		{"two failed responses eject for 1s", []step{
			{0, false, false, true}, {1, false, false, false}, {999 * time.Millisecond, false, false, false}, {1001 * time.Millisecond, false, true, true}}},
		{"ejections in a row double", []step{
			{0, false, false, true}, {1, false, false, false},
			{1001 * time.Millisecond, false, false, true}, {1002 * time.Millisecond, false, false, false}, // second ejection: 2s
			{2500 * time.Millisecond, true, true, false}, {3003 * time.Millisecond, true, true, true}}},
		{"a success resets the failure count", []step{{0, false, false, true}, {1, false, true, true}, {2, false, false, true}}},
		{"passing checks end a passive ejection", []step{
			{0, true, false, true}, {1, true, false, false}, {2, false, false, false}, {3, false, false, false},
			{4, true, true, false}, {5, true, true, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHealth(HealthPolicy{PassiveFailures: 2})
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if s.active {
					h.Active("a", s.ok, "", now)
				} else {
					h.Passive("a", s.ok, "", now, now)
				}
				if got := h.Healthy("a", now); got != s.healthy {
					t.Fatalf("step %d (%+v): healthy %v, want %v", i, s, got, s.healthy)
				}
			}
		})
	}
}

func TestHealthUsableAndRetain(t *testing.T) {
	now := time.Unix(0, 0)
	h := NewHealth(HealthPolicy{ActiveFailures: 1})
	all := []string{"a", "b", "c"}
	if got, ok := h.Usable(all, now); !ok || !slices.Equal(got, all) {
		t.Fatalf("nothing observed: %v %v", got, ok)
	}
	tr, changed := h.Active("b", false, "refused", now)
	if !changed || tr.Healthy || tr.Addr != "b" || tr.Source != "active" {
		t.Fatalf("transition %+v %v", tr, changed)
	}
	if got, ok := h.Usable(all, now); !ok || !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("b down: %v %v", got, ok)
	}
	h.Active("a", false, "", now)
	h.Active("c", false, "", now)
	if got, ok := h.Usable(all, now); ok || !slices.Equal(got, all) {
		t.Fatalf("all down: want all back and false, got %v %v", got, ok)
	}
	if got := h.Unhealthy(now); !slices.Equal(got, all) {
		t.Fatalf("unhealthy %v", got)
	}
	h.Retain([]string{"a"})
	if got := h.Unhealthy(now); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after Retain: unhealthy %v", got)
	}
}

// TestHealthUsableAgreesWithHealthy drives a Health with random checks, responses,
// departures and times (some earlier than the last) and asks Usable at each step: it must
// answer what Healthy says of each address, whether or not any endpoint is down, and must
// return addrs itself (no copy) when every one of them is healthy.
func TestHealthUsableAgreesWithHealthy(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 9))
		h := NewHealth(HealthPolicy{ActiveFailures: 1 + r.IntN(2), PassiveFailures: 1 + r.IntN(2), Ejection: 50 * time.Millisecond, MaxEjection: 400 * time.Millisecond})
		all := make([]string, 12)
		for i := range all {
			all[i] = fmt.Sprintf("10.0.0.%d:8000", i+1)
		}
		now := time.Unix(5000, 0)
		for step := range 3000 {
			a := all[r.IntN(len(all))]
			switch k := r.IntN(20); {
			case k < 8:
				h.Passive(a, r.IntN(3) > 0, "", now, now)
			case k < 16:
				h.Active(a, r.IntN(3) > 0, "", now)
			case k < 17:
				h.Retain(all[:r.IntN(len(all)+1)])
			}
			now = now.Add(time.Duration(r.IntN(60)) * time.Millisecond)
			at := now
			if r.IntN(5) == 0 { // a decision whose clock lags
				at = now.Add(-time.Duration(r.IntN(500)) * time.Millisecond)
			}
			addrs := all[r.IntN(len(all)):]
			var want []string
			for _, x := range addrs {
				if h.Healthy(x, at) {
					want = append(want, x)
				}
			}
			got, ok := h.Usable(addrs, at)
			switch {
			case len(want) == 0:
				if ok || !slices.Equal(got, addrs) {
					t.Fatalf("seed %d step %d: none healthy, Usable = %v %v, want addrs and false", seed, step, got, ok)
				}
			case !ok || !slices.Equal(got, want):
				t.Fatalf("seed %d step %d: Usable = %v %v, want %v", seed, step, got, ok, want)
			case len(want) == len(addrs) && &got[0] != &addrs[0]:
				t.Fatalf("seed %d step %d: every address healthy, but Usable copied them", seed, step)
			}
		}
	}
}

// BenchmarkUsable asks Usable of a fleet's addresses, as every decision does, with every
// endpoint healthy and with one ejected.
func BenchmarkUsable(b *testing.B) {
	for _, n := range []int{256, 10_000} {
		addrs := make([]string, n)
		for i := range addrs {
			addrs[i] = fmt.Sprintf("10.%d.%d.%d:8000", i>>16, i>>8&255, i&255)
		}
		now := time.Unix(5000, 0)
		for _, down := range []int{0, 1} {
			h := NewHealth(HealthPolicy{PassiveFailures: 1, Ejection: time.Hour})
			for _, a := range addrs {
				h.Passive(a, true, "", now, now) // every endpoint observed
			}
			for _, a := range addrs[:down] {
				h.Passive(a, false, "", now, now)
			}
			b.Run(fmt.Sprintf("endpoints=%d/down=%d", n, down), func(b *testing.B) {
				for b.Loop() {
					if got, _ := h.Usable(addrs, now); len(got) != n-down {
						b.Fatalf("%d usable, want %d", len(got), n-down)
					}
				}
			})
		}
	}
}

// The default policy ejects on the first failed response, for Ejection (1 s), and the
// endpoint rejoins after it or at the next success, as with any policy.
func TestHealthDefaultEjectsOnTheFirstFailedResponse(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name       string
		then       func(h *Health) // after the failure at t0
		at         time.Duration
		wantUsable bool
	}{
		{"out at once", func(*Health) {}, 0, false},
		{"out for the ejection", func(*Health) {}, 999 * time.Millisecond, false},
		{"back after it", func(*Health) {}, time.Second, true},
		{"back at a success", func(h *Health) { h.Passive("a", true, "", t0.Add(time.Millisecond), t0.Add(time.Millisecond)) }, time.Millisecond, true},
		{"still out at a success routed before the failure", func(h *Health) {
			h.Passive("a", true, "", t0.Add(-time.Millisecond), t0.Add(time.Millisecond))
		}, time.Millisecond, false},
		{"back at a success routed at the failure's instant", func(h *Health) { h.Passive("a", true, "", t0, t0.Add(time.Millisecond)) }, time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHealth(HealthPolicy{})
			tr, changed := h.Passive("a", false, "503", t0, t0)
			if !changed || tr.Healthy || tr.Source != "passive" {
				t.Fatalf("first failure: %+v, %v; want a passive transition to unhealthy", tr, changed)
			}
			tt.then(h)
			if got := h.Healthy("a", t0.Add(tt.at)); got != tt.wantUsable {
				t.Fatalf("healthy %v at +%v, want %v", got, tt.at, tt.wantUsable)
			}
		})
	}
}
