package tokenbucket

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name      string
		take      float64
		after     time.Duration // Refill this long after the take
		level     float64
		tokens    float64
		until     time.Duration
		fullAfter time.Duration
		full      bool
	}{
		{"within the burst", 600, 0, 0, 400, 0, 0, false},
		{"into debt", 1500, 0, 0, -500, 500 * time.Millisecond, 0, false},
		{"debt repaid by the rate", 1500, 250 * time.Millisecond, 0, -250, 250 * time.Millisecond, 0, false},
		{"a level below zero", 2500, 0, -1000, -1500, 500 * time.Millisecond, 0, false},
		{"refilled no higher than the burst", 200, 10 * time.Second, 0, 1000, 0, 0, true},
		{"full again later", 500, 0, 0, 500, 0, 500 * time.Millisecond, true},
		{"not yet full", 500, 0, 0, 500, 0, 499 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(1000, 1000, t0) // a thousand tokens a second, a thousand at most
			b.Take(tc.take)
			b.Refill(t0.Add(tc.after))
			if got := b.Tokens(); got != tc.tokens {
				t.Errorf("Tokens = %v, want %v", got, tc.tokens)
			}
			if got := b.Until(tc.level); got != tc.until {
				t.Errorf("Until(%v) = %v, want %v", tc.level, got, tc.until)
			}
			if got := b.FullAt(t0.Add(tc.after + tc.fullAfter)); got != tc.full {
				t.Errorf("FullAt(+%v) = %v, want %v", tc.after+tc.fullAfter, got, tc.full)
			}
		})
	}
	b := New(1000, 1000, t0)
	b.Refill(t0.Add(-time.Second)) // a clock that went back refills nothing and moves nothing
	if b.Tokens() != 1000 || !b.FullAt(t0) {
		t.Errorf("after a backwards Refill: %v tokens", b.Tokens())
	}
}
