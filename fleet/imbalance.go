package fleet

import (
	"math"
	"sync"
	"time"
)

// Imbalance measures load imbalance the way the published experiment does: over a
// sliding window of samples taken at a fixed interval, the mean in-flight count of the
// busiest endpoint divided by that of the idlest (1.0 = even). The caller drives Sample
// from a ticker; Imbalance reads no clock itself.
type Imbalance struct {
	window time.Duration

	mu      sync.Mutex
	samples []sample // oldest first
}

type sample struct {
	at    time.Time
	loads map[string]int
}

// NewImbalance returns an empty tracker over the given window.
func NewImbalance(window time.Duration) *Imbalance { return &Imbalance{window: window} }

// Sample records the loads at now and drops samples older than the window.
func (m *Imbalance) Sample(now time.Time, loads []Load) {
	l := make(map[string]int, len(loads))
	for _, x := range loads {
		l[x.Addr] = x.InFlight()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples = append(m.samples, sample{now, l})
	cut := now.Add(-m.window)
	i := 0
	for i < len(m.samples) && m.samples[i].at.Before(cut) {
		i++
	}
	m.samples = append(m.samples[:0], m.samples[i:]...)
}

// Value returns busiest mean / idlest mean over the window, for the endpoints present in
// the newest sample. It is 1 with fewer than two endpoints or no load at all, and +Inf
// when some endpoint carried load while another carried none.
func (m *Imbalance) Value() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		return 1
	}
	newest := m.samples[len(m.samples)-1].loads
	if len(newest) < 2 {
		return 1
	}
	sums := make(map[string]int, len(newest))
	for _, s := range m.samples {
		for a := range newest {
			sums[a] += s.loads[a]
		}
	}
	lo, hi := math.Inf(1), 0.0
	for _, v := range sums {
		f := float64(v) / float64(len(m.samples))
		lo, hi = min(lo, f), max(hi, f)
	}
	switch {
	case hi == 0:
		return 1
	case lo == 0:
		return math.Inf(1)
	}
	return hi / lo
}
