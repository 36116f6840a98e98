package vtime

import (
	"math"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// result turns the measured requests and samples into a Run.
func (w *world) result(arm experiment.Arm, seed uint64, reqs []workload.Request, before []experiment.EngineStats) experiment.Run {
	run := experiment.Run{Arm: arm, Seed: seed, Interval: w.cfg.SampleInterval, Running: w.samples}
	start := w.pending[0].sent - reqs[0].SendAt
	for _, p := range w.pending {
		row := experiment.Row{
			Index:        p.req.Index,
			PrefixID:     p.req.PrefixID,
			SendAt:       (p.sent - start).Seconds(),
			TTFT:         math.NaN(),
			E2E:          math.NaN(),
			PromptTokens: len(p.req.Tokens),
			Status:       "ok",
		}
		if p.engine >= 0 {
			row.Engine = w.addrs[p.engine]
		}
		r := &p.sim
		switch {
		case p.errText != "":
			row.Status, row.Error = "error", p.errText
		case !r.Done:
			row.Status, row.Error = "error", "request did not finish"
		}
		if len(r.TokenTimes) > 0 {
			back := w.cfg.Router.ResponseLatency // every chunk's way back to the client
			row.TTFT = (r.TokenTimes[0] + back - p.sent).Seconds()
			row.E2E = (r.TokenTimes[len(r.TokenTimes)-1] + back - p.sent).Seconds()
			row.ITLs = make([]float64, len(r.TokenTimes)-1)
			for i := 1; i < len(r.TokenTimes); i++ {
				row.ITLs[i-1] = float64(r.TokenTimes[i]-r.TokenTimes[i-1]) / 1e6
			}
		}
		row.CompletionTokens = len(r.TokenTimes)
		row.CachedTokens, row.LoadedTokens, row.Preemptions = r.CachedTokens, r.LoadedTokens, r.Preemptions
		run.Rows = append(run.Rows, row)
	}
	run.Window = reqs[len(reqs)-1].SendAt.Seconds() - reqs[0].SendAt.Seconds()
	run.Span = experiment.Span(run.Rows)
	after := w.engineStats()
	for i := range after {
		after[i].PrefixQueries -= before[i].PrefixQueries
		after[i].PrefixHits -= before[i].PrefixHits
		after[i].Preemptions -= before[i].Preemptions
		after[i].Requests -= before[i].Requests
	}
	run.Engines = after
	return run
}
