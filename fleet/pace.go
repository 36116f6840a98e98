package fleet

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// paceWeight is the weight of each new decode duration in an endpoint's pace: the mean
// follows roughly the last 1/paceWeight = 32 requests, enough to average output lengths
// out and quick enough to follow an engine that slows down.
const paceWeight = 1.0 / 32

// pace is an exponentially weighted mean of decode durations. Writers serialize on mu;
// readers (every decision, per candidate) load the published mean without a lock.
type pace struct {
	pub atomic.Uint64 // math.Float64bits of m, 0 before the first sample; first, as the one readers load
	mu  sync.Mutex
	n   int
	m   float64 // seconds; guarded by mu
}

func (p *pace) observe(d time.Duration) {
	if d < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w := max(paceWeight, 1/float64(p.n+1)) // a plain mean until there are 32 samples
	p.m += w * (d.Seconds() - p.m)
	p.n++
	p.pub.Store(math.Float64bits(p.m))
}

// mean returns the current mean; 0 before the first sample.
func (p *pace) mean() time.Duration {
	return time.Duration(math.Float64frombits(p.pub.Load()) * float64(time.Second))
}
