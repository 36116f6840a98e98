package scoring

import "math"

// PrefillSlowdown is what ttftaware scales a candidate's prefill by: the lower of the
// engine's two measured prefill slowdowns, the one from the caller's own bookings
// (Candidate.PrefillSlowdown, NeedsPrefillTimes) and the scraped one
// (EngineMetrics.PrefillSlowdown), either alone when only one is measured, or 1 when
// neither is. Each over-reads in its own way and neither reads an engine faster than it
// is (decision 1691): the scraped one, from vLLM's per-request prefill spans, counts a
// step once per request in it, so a loaded engine whose steps are shared reads several
// times slow; the booked one counts each moment once but weighs it against the work the
// caller believed it asked for, so a prompt believed cached and computed, or a wait for
// KV, reads as slowness. The lower is the nearer. The KV wait is not scaled: it is the
// running sequences' decode time (the measured pace), not this engine's prefill.
func PrefillSlowdown(c Candidate) float64 {
	s := 0.0
	if c.Engine.Known && c.Engine.PrefillSlowdown > 0 {
		s = c.Engine.PrefillSlowdown
	}
	if b := c.PrefillSlowdown; b > 0 && (s == 0 || b < s) {
		s = b
	}
	if s == 0 {
		return 1
	}
	return s
}

// PrefillModel is the calibrated model's time, in seconds, for the work a request with
// uncached prompt tokens asks of candidate c, the engine's time shared among the requests
// that share its steps:
//
//	admit + uncached x TokenCost + steps x (StepCost + decode x SeqStepCost)
//	steps = ceil(uncached / StepTokens)                           when nothing is in prefill on c
//	      = max(uncached / StepTokens, 1 / (prefill + 1))         else
//
// with admit as in ttftaware's est(s), its admission among the requests on c. A request
// alone takes its own chunks' steps, with the decoding sequences they carry, as est(s)
// charges it. With others in prefill beside it the engine packs their tokens into steps
// of StepTokens, so each step's fixed time and decode work are shared: a request holds
// its tokens' share of the steps, and no more than one step among the prefill + 1
// requests that may share it. Each step is then charged about once, as the time the
// engine takes counts it once. A caller measuring c's prefill speed (NeedsPrefillTimes)
// divides the time c had its requests awaiting a first token by the sum of this over
// them (enginemetrics.BookedSpeed).
func PrefillModel(c Candidate, uncached int) float64 {
	u := float64(max(uncached, 0))
	steps := max(1, math.Ceil(u/StepTokens))
	if c.Prefill > 0 {
		steps = max(u/StepTokens, 1/float64(c.Prefill+1))
	}
	admit := AdmitCost.Seconds() + float64(max(c.Prefill, 0)+max(c.Decode, 0))*AdmitSeqCost.Seconds()
	return admit + u*TokenCost.Seconds() + steps*(StepCost.Seconds()+float64(max(c.Decode, 0))*SeqStepCost.Seconds())
}
