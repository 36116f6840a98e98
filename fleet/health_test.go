package fleet

import (
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
			h := NewHealth(HealthPolicy{})
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if s.active {
					h.Active("a", s.ok, "", now)
				} else {
					h.Passive("a", s.ok, "", now)
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
