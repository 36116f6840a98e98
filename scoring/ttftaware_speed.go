package scoring

import "math"

// PrefillSlowdown is what ttftaware scales a candidate's prefill by: its engine's speed,
// its measured prefill time over the calibrated model's, read from three measures that
// err in known directions (decision 1706):
//
//	hi = EngineMetrics.PrefillSlowdown         (scraped: vLLM's per-request prefill spans)
//	lo = hi / Candidate.PrefillOverlap         (hi, each moment counted once)
//	slowdown = Candidate.PrefillBooked clamped into [lo, hi]
//
// The scraped reading counts the tokens the engine computed but each step once per request
// in it, so it reads a shared engine slow: the speed is no higher. Divided by how many of
// the caller's requests awaited a first token at once, each moment counts once, but a
// request's wait in a queue counts as sharing: the speed is no lower. The booked reading
// (the caller's own requests, each moment counted once, over the model's time for the work
// it believed it asked for) is the estimate, and the two bound its error when the engine
// computed more or less than was believed (a CPU-tier hit the index did not show, a prompt
// believed cached and computed). Unmeasured parts fall away: no overlap, lo = hi; no
// booked reading, hi; nothing scraped, the booked reading; neither, 1. The KV wait is not
// scaled: it is the running sequences' decode time (the measured pace), not this engine's
// prefill.
func PrefillSlowdown(c Candidate) float64 {
	if !c.Engine.Known || c.Engine.PrefillSlowdown <= 0 {
		if c.PrefillBooked > 0 {
			return c.PrefillBooked
		}
		return 1
	}
	hi := c.Engine.PrefillSlowdown
	if c.PrefillBooked <= 0 {
		return hi
	}
	lo := hi
	if c.PrefillOverlap >= 1 {
		lo = hi / c.PrefillOverlap
	}
	return min(max(c.PrefillBooked, lo), hi)
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
