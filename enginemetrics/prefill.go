package enginemetrics

import (
	"math"

	"github.com/loadaware/loadaware-epp/scoring"
)

// PrefillWindow is the requests PrefillSpeed's ratio is smoothed over: each request's
// weight decays by e per PrefillWindow requests after it. A request's prefill time strays
// from the model by its batch's decode load and chunk boundaries; over 100 requests that
// noise falls to a tenth (1/sqrt(100)), and one request, even 3x off the model, moves the
// ratio by under 2%.
const PrefillWindow = 100

// PrefillSpeed follows one engine's measured prefill time against the calibrated engine
// model's (scoring's A10 constants) from its cumulative prefill counters, read at each
// scrape (PrefillCounters). The model charges a request AdmitCost + StepCost and each
// computed token TokenCost + StepCost/StepTokens (its share of the steps its chunks take).
// Its zero value is ready; it is not safe for concurrent use.
type PrefillSpeed struct {
	last              PrefillCounters // the counters at the last Observe; Known once seen
	took, model, reqs float64         // decayed sums of the measured and modelled times and of requests
	aged              float64         // last.Count at the last Age
	mark              float64         // the fleet's first tokens (Age's fleet) when this engine last had one
}

// Observe takes an engine's cumulative counters and returns the first tokens they add;
// unknown ones are ignored. Counters that go back (an engine restart) start the window
// again.
func (p *PrefillSpeed) Observe(c PrefillCounters) float64 {
	if !c.Known {
		return 0
	}
	l := p.last
	if !l.Known || c.Seconds < l.Seconds || c.Count < l.Count || c.Computed < l.Computed {
		*p = PrefillSpeed{last: c, aged: c.Count, mark: p.mark}
		return 0
	}
	dn := c.Count - l.Count
	if dn == 0 {
		return 0
	}
	perReq := scoring.AdmitCost.Seconds() + scoring.StepCost.Seconds()
	perTok := scoring.TokenCost.Seconds() + scoring.StepCost.Seconds()/scoring.StepTokens
	w := math.Exp(-dn / PrefillWindow)
	p.took = p.took*w + (c.Seconds - l.Seconds)
	p.model = p.model*w + dn*perReq + (c.Computed-l.Computed)*perTok
	p.reqs = p.reqs*w + dn
	p.last = c
	return dn
}

// Age caps the reading of an engine whose reading describes a load that has drained: one
// that is idle now (idle: nothing running or waiting at its scrape) and has had no first
// token while its fleet of engines had PrefillWindow x engines of them. An engine with
// its share of the fleet's requests would have replaced its window (decayed it by e) in
// that many; an idle engine that took none reads the prefill of steps it shared with a
// load long gone (a warm-up burst's queue counts each shared step once per request in it),
// and a reading that high keeps requests away, so it would never be replaced. Such a
// reading above peers, the highest reading of the fleet's other engines now, is replaced
// by peers at the weight of half a window (the least that reads as measured), so the
// engine's next requests measure it afresh; one at or below peers (a slower GPU among
// faster ones reads its own speed) is kept. With no peer measured (peers 0) the window is
// dropped (Slowdown unknown until half a window). fleet is the fleet's first tokens counted
// so far (the sum of every engine's Observe), taken after this engine's Observe of the
// same round.
func (p *PrefillSpeed) Age(fleet float64, engines int, idle bool, peers float64) {
	if p.last.Count != p.aged {
		p.aged, p.mark = p.last.Count, fleet
		return
	}
	if !idle || p.reqs <= 0 || fleet-p.mark < PrefillWindow*float64(max(engines, 1)) {
		return
	}
	switch s := p.Slowdown(); {
	case peers <= 0:
		p.took, p.model, p.reqs = 0, 0, 0
	case s > peers:
		p.model *= min(PrefillWindow/2/p.reqs, 1)
		p.reqs = min(p.reqs, PrefillWindow/2)
		p.took = peers * p.model
	}
}

// Peers is the two highest prefill slowdowns of a fleet's engines, gathered in one pass
// (Add each engine's reading); Of gives an engine the highest of the others' readings, the
// peers Age takes. The zero value is an empty fleet (Of gives 0).
type Peers[K comparable] struct {
	top, second float64
	at          K    // the engine reading top
	found       bool // top was read by an engine (a reading above 0)
}

// Add takes engine k's reading.
func (p *Peers[K]) Add(k K, reading float64) {
	switch {
	case reading > p.top:
		p.top, p.second, p.at, p.found = reading, p.top, k, true
	case reading > p.second:
		p.second = reading
	}
}

// Of is the highest reading among the engines other than k.
func (p *Peers[K]) Of(k K) float64 {
	if p.found && k == p.at {
		return p.second
	}
	return p.top
}

// Slowdown is the measured prefill time over the model's within the window: 1.3 for an
// engine whose prefill takes 1.3 times the A10's. It is 0, meaning unknown, until half a
// window of requests has been seen.
func (p *PrefillSpeed) Slowdown() float64 {
	if p.reqs < PrefillWindow/2 || p.model <= 0 {
		return 0
	}
	return p.took / p.model
}
