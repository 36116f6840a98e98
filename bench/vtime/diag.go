package vtime

import "github.com/loadaware/loadaware-epp/picker"

// PickSeen, when set (by a diagnostic test, before its runs and with one worker), sees each
// decision the shipped picker makes for a measured request of a cell, before the request
// is dispatched: the prompt's token ids, the decision, and by address how many of the
// prompt's leading tokens each engine's GPU prefix cache holds then (full blocks; rank 0
// of a data-parallel engine). Nil in every other use.
var PickSeen func(tokens []uint32, d *picker.Decision, cached map[string]int)

// pickSeen calls PickSeen for p's decision d.
func (w *world) pickSeen(p *pending, d *picker.Decision) {
	cached := make(map[string]int, len(w.addrs))
	for i, a := range w.addrs {
		cached[a] = w.engines[i].Ranks()[0].CachedPrefix(p.req.Tokens, p.req.Adapter)
	}
	PickSeen(p.req.Tokens, d, cached)
}
