package sim

import (
	"fmt"
	"slices"
	"time"
)

// MaxDPRanks bounds a DP engine's ranks (vLLM's wide expert-parallel deployments run
// 64 and more; the bench needs a handful).
const MaxDPRanks = 64

// DP is one vLLM server running data-parallel ranks behind one port (vllm serve
// --data-parallel-size N with its internal load balancer): each rank is an Engine of its
// own (its scheduler, KV pool and LMCache CPU tier) stepping on its own clock. A request
// pinned to a rank (Request.PinRank: vLLM's x-data-parallel-rank header) runs there; any
// other where vLLM's balancer sends it (Balance). A DP of one rank is its Engine exactly.
//
// Its steps overlap: Start may be called again while ranks are busy, and returns the
// end of one step at a time; the caller calls Finish once at each end it was given, in
// time order (ties in the order given). It is not safe for concurrent use.
type DP struct {
	ranks    []*Engine
	promised []bool // the rank's step end was returned by Start and not yet finished
}

// NewDP returns an idle server of ranks engines of cfg, each with empty caches.
func NewDP(cfg Config, keys KeyFunc, ranks int) (*DP, error) {
	if ranks < 1 || ranks > MaxDPRanks {
		return nil, fmt.Errorf("sim: %d data-parallel ranks: use 1..%d", ranks, MaxDPRanks)
	}
	d := &DP{promised: make([]bool, ranks)}
	for range ranks {
		e, err := New(cfg, keys)
		if err != nil {
			return nil, err
		}
		d.ranks = append(d.ranks, e)
	}
	return d, nil
}

// Ranks returns the rank engines, rank r at r (the slice is the server's own).
func (d *DP) Ranks() []*Engine { return d.ranks }

// Config returns the ranks' constants.
func (d *DP) Config() Config { return d.ranks[0].cfg }

// Add queues r on its pinned rank, or on the rank Balance chooses. A pin outside the
// ranks is refused, as vLLM refuses it (a 400 naming the range).
func (d *DP) Add(r *Request) error {
	k := r.PinRank - 1
	switch {
	case r.PinRank == 0:
		k = d.Balance()
	case k < 0 || k >= len(d.ranks):
		return fmt.Errorf("sim: request %q asks for data-parallel rank %d, outside [0, %d)", r.ID, k, len(d.ranks))
	}
	return d.ranks[k].Add(r)
}

// Balance is the rank vLLM's DP load balancer sends an unpinned request to: the one with
// the least waiting*4 + running, the first from rank 0 on a tie
// (DPLBAsyncMPClient.get_core_engine_for_request, vllm/v1/engine/core_client.py; one API
// server, so its start index is 0). vLLM reads the counts its coordinator last published
// (every 100 ms) plus the requests it sent since; Balance reads the ranks' queues as they
// are, a balancer that is never stale.
func (d *DP) Balance() int {
	best, bestScore := 0, -1
	for i, e := range d.ranks {
		if s := 4*len(e.waiting) + len(e.running); bestScore < 0 || s < bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// Busy reports whether any rank is in a step, and the earliest end of those.
func (d *DP) Busy() (time.Duration, bool) {
	var end time.Duration
	busy := false
	for _, e := range d.ranks {
		if e.busy && (!busy || e.stepEnd < end) {
			end, busy = e.stepEnd, true
		}
	}
	return end, busy
}

// Start begins a step at now on every idle rank that has work, and returns the earliest
// end of a step in progress that it has not returned before (false when there is none).
// Call it until it reports false.
func (d *DP) Start(now time.Duration) (time.Duration, bool) {
	for i, e := range d.ranks {
		if !e.busy {
			if _, ok := e.Start(now); ok {
				d.promised[i] = false
			}
		}
	}
	best := -1
	for i, e := range d.ranks {
		if e.busy && !d.promised[i] && (best < 0 || e.stepEnd < d.ranks[best].stepEnd) {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	d.promised[best] = true
	return d.ranks[best].stepEnd, true
}

// Finish completes the earliest step Start returned (the first rank's on a tie) and
// reports it, Outcome.Rank naming the rank. The Outcome is valid until that rank's next
// Finish.
func (d *DP) Finish() Outcome {
	best := -1
	for i, e := range d.ranks {
		if e.busy && d.promised[i] && (best < 0 || e.stepEnd < d.ranks[best].stepEnd) {
			best = i
		}
	}
	if best < 0 {
		return Outcome{}
	}
	d.promised[best] = false
	out := d.ranks[best].Finish()
	out.Rank = best
	return out
}

// Metrics returns the ranks' gauges and totals summed (the KV usage is their mean, the
// adapters the running and waiting ones of any rank, MaxLoRAs per rank): what a scrape of
// vLLM's /metrics sums over its engine label, with each rank's running and waiting kept
// apart (Metrics.Ranks). One rank: its own.
func (d *DP) Metrics() Metrics {
	if len(d.ranks) == 1 {
		return d.ranks[0].Metrics()
	}
	m := Metrics{Ranks: make([]RankGauges, len(d.ranks))}
	for i, e := range d.ranks {
		r := e.Metrics()
		m.Ranks[i] = RankGauges{Running: r.Running, Waiting: r.Waiting}
		m.Running += r.Running
		m.Waiting += r.Waiting
		m.KVUsage += r.KVUsage / float64(len(d.ranks))
		m.PrefixQueries += r.PrefixQueries
		m.PrefixHits += r.PrefixHits
		m.Preemptions += r.Preemptions
		m.Steps += r.Steps
		m.CPUTokens += r.CPUTokens
		m.AdapterLoads += r.AdapterLoads
		m.MaxLoRAs = r.MaxLoRAs
		m.RunningAdapters = append(m.RunningAdapters, r.RunningAdapters...)
		m.WaitingAdapters = append(m.WaitingAdapters, r.WaitingAdapters...)
	}
	m.RunningAdapters, m.WaitingAdapters = sortedSet(m.RunningAdapters), sortedSet(m.WaitingAdapters)
	return m
}

func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}
