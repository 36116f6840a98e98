// Package tokenbucket is the arithmetic of the picker's read rates (ext_proc connections,
// LMCache peers): a bucket of byte tokens, refilled at a rate up to a burst, that a reader
// may take into debt and then wait out. It keeps no lock and reads no clock: callers pass
// the time and hold their own lock.
package tokenbucket

import "time"

// Bucket holds up to its burst of tokens, refilled at its rate a second. Taking more than
// it holds leaves it in debt (negative); Until says how long the rate takes to bring it back
// to a level. Use New: the zero Bucket has no rate.
type Bucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

// New returns a full bucket at now. rate must be positive.
func New(rate, burst float64, now time.Time) Bucket {
	return Bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

// Refill adds the tokens earned since the last Refill (or New), up to the burst.
func (b *Bucket) Refill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.burst, b.tokens+dt*b.rate)
		b.last = now
	}
}

// Take removes n tokens, into debt if need be.
func (b *Bucket) Take(n float64) { b.tokens -= n }

// Tokens is what the bucket holds at its last Refill: negative in debt.
func (b *Bucket) Tokens() float64 { return b.tokens }

// Until is how long the rate takes to bring the bucket up to level from what it holds at
// its last Refill: 0 when it holds level already.
func (b *Bucket) Until(level float64) time.Duration {
	if b.tokens >= level {
		return 0
	}
	return time.Duration((level - b.tokens) * float64(time.Second) / b.rate)
}

// FullAt reports whether the bucket will be full at now, without refilling it.
func (b *Bucket) FullAt(now time.Time) bool {
	return b.tokens+now.Sub(b.last).Seconds()*b.rate >= b.burst
}
