package picker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/scoring"
)

// engineView answers fixed metrics and records which addresses were asked, at what time.
type engineView struct {
	mu    sync.Mutex
	m     map[string]scoring.EngineMetrics
	asked []string
	at    time.Time
}

func (v *engineView) Engine(addr string, now time.Time) scoring.EngineMetrics {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.asked = append(v.asked, addr)
	v.at = now
	return v.m[addr]
}

// The scraped engine metrics reach the policies that read them, at the decision's time,
// and are not even asked for by the others.
func TestEngineMetricsReachOnlyTheirReaders(t *testing.T) {
	const a1, a2 = "10.0.0.1:8000", "10.0.0.2:8000"
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		policy string
		asked  int // addresses asked per decision
	}{
		{"gie-default", 2},
		{"llmd-precise", 2},
		{"loadaware", 0},
		{"leastload", 0},
		{"dynamo-kv", 0},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			v := &engineView{m: map[string]scoring.EngineMetrics{
				a1: {Known: true, Waiting: 5, KVUsage: 0.9},
				a2: {Known: true, Waiting: 0, KVUsage: 0.1},
			}}
			p := newPicker(t, Options{Fleet: newFleet(a1, a2), Policy: tc.policy, Now: func() time.Time { return now },
				Cache: mapCache{}, Engines: v})
			if got := p.NeedsEngineMetrics(); got != (tc.asked > 0) {
				t.Fatalf("NeedsEngineMetrics = %v; want %v", got, tc.asked > 0)
			}
			d, err := p.Pick(context.Background(), Request{Tokens: []uint32{1, 2, 3}})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Booking.Release()
			if len(v.asked) != tc.asked {
				t.Fatalf("asked for %v; want %d addresses", v.asked, tc.asked)
			}
			if tc.asked > 0 && !v.at.Equal(now) {
				t.Fatalf("asked at %v; want the decision's time %v", v.at, now)
			}
		})
	}
}
