package scoring

// PrefillSlowdown is what ttftaware scales a candidate's prefill by: its engine's measured
// prefill time over the calibrated model's (EngineMetrics.PrefillSlowdown), or 1 when the
// engine is not scraped, not yet measured, or idle. The KV wait is not scaled: it is the
// running sequences' decode time (the measured pace), not this engine's prefill.
//
// Idle means nothing in flight there, neither this picker's requests (Candidate.Prefill,
// Decode) nor any the engine reports running or waiting. The measured ratio sums each
// request's prefill time, which vLLM counts from its admission to its first token, over
// every step it is in; under load those steps also carry the other requests' chunks and
// decodes, so the sum over-counts the engine's own time by the requests prefilling beside
// it (2-6x on a chat fleet at 96% of capacity, decision 1680). A prompt sent to an idle
// engine shares no step, and the measurement, taken when the engine was last loaded and
// not updated while it takes no requests, would otherwise keep the engine idle.
func PrefillSlowdown(c Candidate) float64 {
	if c.Prefill <= 0 && c.Decode <= 0 && c.Engine.Running <= 0 && c.Engine.Waiting <= 0 {
		return 1
	}
	if c.Engine.Known && c.Engine.PrefillSlowdown > 0 {
		return c.Engine.PrefillSlowdown
	}
	return 1
}
