package fleet

import (
	"sync"
	"time"
)

// paceWeight is the weight of each new decode duration in an endpoint's pace: the mean
// follows roughly the last 1/paceWeight = 32 requests, enough to average output lengths
// out and quick enough to follow an engine that slows down.
const paceWeight = 1.0 / 32

// pace is an exponentially weighted mean of decode durations.
type pace struct {
	mu sync.Mutex
	n  int
	m  float64 // seconds
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
}

func (p *pace) mean() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return 0
	}
	return time.Duration(p.m * float64(time.Second))
}
