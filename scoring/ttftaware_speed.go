package scoring

import "math"

// PrefillSlowdown is what ttftaware scales a candidate's prefill by. Two measures of the
// engine's prefill are kept (decision 1691): the scraped one (EngineMetrics.PrefillSlowdown,
// vLLM's per-request prefill spans over the model's time) reads the engine's speed times
// the sharing of its steps at the time, since a request's span also carries the work of
// the requests and decoding sequences beside it; the booked one (Candidate.PrefillSlowdown,
// NeedsPrefillTimes: the time the engine had the caller's requests awaiting a first token
// over the model's time for their work) counts each moment once, and reads the speed
// alone, with what the caller believed cached and the engine computed. On an engine with
// work, a new prompt's prefill shares its steps as the last ones did: the scraped measure
// (the booked one until it is measured). On an idle engine (nothing of the caller's in
// flight, nothing running or waiting scraped) nothing shares them: the lower of the two,
// either alone when only one is measured. 1 when none is.
//
// An idle engine read at its loaded sharing estimates an idle prompt several times its
// true time, gets no request, and keeps the reading (decision 1680's h11).
func PrefillSlowdown(c Candidate) float64 {
	scraped := 0.0
	if c.Engine.Known && c.Engine.PrefillSlowdown > 0 {
		scraped = c.Engine.PrefillSlowdown
	}
	booked := max(c.PrefillSlowdown, 0)
	idle := c.Prefill <= 0 && c.Decode <= 0 && (!c.Engine.Known || c.Engine.Running+c.Engine.Waiting <= 0)
	switch {
	case idle && booked > 0 && (scraped == 0 || booked < scraped):
		return booked
	case scraped > 0:
		return scraped
	case booked > 0:
		return booked
	}
	return 1
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
