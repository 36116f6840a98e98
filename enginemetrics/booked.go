package enginemetrics

import (
	"math"
	"time"
)

// BookedSpeed follows one engine's prefill speed from a router's own requests to it: the
// time the engine had at least one of them awaiting its first token, over the calibrated
// engine model's time for the work they asked for (the caller's model of each request,
// scoring.PrefillModel: its admission, its uncached tokens, its chunks' steps with the
// decoding sequences they carry). Each moment of the engine's time counts once however
// many requests share its steps, where PrefillSpeed, from vLLM's per-request prefill
// spans, counts a step once per request in it and reads an engine whose steps are shared
// several times slow (decision 1691).
//
// The time counted includes what the model does not charge these requests: the path
// from the router to the engine and back, and waits for KV capacity; and the engine's
// work for requests routed elsewhere while one of these waits. It is weighed against the
// work the caller believed it asked for: a prompt believed uncached that the engine found
// in its CPU tier reads as speed, one believed cached and computed as slowness (decision
// 1691: 0.78 and 3.59); Overlap lets a caller bound it by PrefillSpeed's reading (decision
// 1706). The ratios are smoothed over PrefillWindow first tokens as PrefillSpeed's is. Its
// zero value is ready; it is not safe for concurrent use.
type BookedSpeed struct {
	pending           int       // requests sent and awaiting their first token
	at                time.Time // when pending last changed
	busy, mark        float64   // seconds with pending > 0; busy at the last first token
	took, model, reqs float64   // decayed sums of the busy time, the modelled time and the first tokens
	spans             float64   // decayed sum of each request's own time from sent to first token
}

// Sent records a request sent to the engine at now.
func (b *BookedSpeed) Sent(now time.Time) {
	b.advance(now)
	b.pending++
}

// FirstToken records that a request sent at sent (Sent) had its first token at now, the
// model's time for its work being model seconds: the busy time since the last first token
// is weighed against it, and its own span, now - sent, counts towards Overlap.
func (b *BookedSpeed) FirstToken(sent, now time.Time, model float64) {
	if b.pending <= 0 {
		return
	}
	b.advance(now)
	b.pending--
	w := math.Exp(-1.0 / PrefillWindow)
	b.took = b.took*w + (b.busy - b.mark)
	b.spans = b.spans*w + max(now.Sub(sent), 0).Seconds()
	b.model = b.model*w + max(model, 0)
	b.reqs = b.reqs*w + 1
	b.mark = b.busy
}

// Abandoned records that a request sent earlier ended at now without a first token. Its
// time is weighed with the next first token's.
func (b *BookedSpeed) Abandoned(now time.Time) {
	if b.pending <= 0 {
		return
	}
	b.advance(now)
	b.pending--
}

// advance adds the time from the last change to now to busy when a request was pending.
func (b *BookedSpeed) advance(now time.Time) {
	if b.pending > 0 {
		b.busy += max(now.Sub(b.at), 0).Seconds()
	}
	b.at = now
}

// Slowdown is the engine's busy time over the model's within the window: 1.3 for an
// engine whose prefill takes 1.3 times the model's. It is 0, meaning unknown, until half
// a window of first tokens has been seen.
func (b *BookedSpeed) Slowdown() float64 {
	if b.reqs < PrefillWindow/2 || b.model <= 0 {
		return 0
	}
	return b.took / b.model
}

// Overlap is how many of the requests awaited their first token at once, on average over
// the time any did: the sum of their spans over that busy time, at least 1. PrefillSpeed,
// from vLLM's per-request prefill spans, counts each moment once per request in it, so its
// reading over this one counts each moment once, with the engine's own count of the
// tokens computed (a span here starts when the request is sent, vLLM's when the engine
// admits it: a queue ahead of the request reads as overlap too, so the quotient errs
// fast). It is 0, meaning unknown, until half a window of first tokens has been seen.
func (b *BookedSpeed) Overlap() float64 {
	if b.reqs < PrefillWindow/2 || b.took <= 0 {
		return 0
	}
	return max(b.spans/b.took, 1)
}
