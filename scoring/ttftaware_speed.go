package scoring

// PrefillSlowdown is what ttftaware scales a candidate's prefill by: its engine's measured
// prefill time over the calibrated model's (EngineMetrics.PrefillSlowdown), or 1 when the
// engine is not scraped or not yet measured. The KV wait is not scaled: it is the running
// sequences' decode time (the measured pace), not this engine's prefill.
func PrefillSlowdown(c Candidate) float64 {
	if c.Engine.Known && c.Engine.PrefillSlowdown > 0 {
		return c.Engine.PrefillSlowdown
	}
	return 1
}
