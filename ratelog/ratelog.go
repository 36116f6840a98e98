// Package ratelog decides when a repeated log line is written: at most once a period for
// each key (a limit, a peer), saying how many times it happened since the last line. A
// flood then costs a log line a period, not one an event.
package ratelog

import (
	"sync"
	"time"
)

// maxKeys bounds the keys remembered; past it they are all forgotten, so a flood of new
// keys (peer addresses) costs memory for at most this many and then logs at once again.
const maxKeys = 1024

// Limiter is safe for concurrent use. The zero Limiter has no period: every event is due.
type Limiter struct {
	period time.Duration
	mu     sync.Mutex
	last   map[string]time.Time
	n      map[string]int
}

// New returns a Limiter that lets one line a period through for each key.
func New(period time.Duration) *Limiter { return &Limiter{period: period} }

// Due counts one event of key at now and reports whether its line is to be written now,
// with the number of events of key since the last line, this one included. The first
// event of a key is always due.
func (l *Limiter) Due(key string, now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil || len(l.last) >= maxKeys {
		l.last, l.n = map[string]time.Time{}, map[string]int{}
	}
	l.n[key]++
	if last, seen := l.last[key]; seen && now.Sub(last) < l.period {
		return 0, false
	}
	n := l.n[key]
	l.last[key], l.n[key] = now, 0
	return n, true
}
