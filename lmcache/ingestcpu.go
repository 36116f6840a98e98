package lmcache

import (
	"time"

	"github.com/loadaware/loadaware-epp/tokenbucket"
)

// Defaults of the pull loop's CPU budget (decision 1189). The per-IP byte rate bounds what
// each engine sends, not what the fleet sends together, and each engine's bucket starts
// full: a fleet starting at once, or a flooding peer's first second, is ingested as fast as
// the loop runs, on a core the picker's decisions need. The budget bounds the sum: the loop
// (receiving, decoding and applying, on its thread's CPU clock) may use on average a quarter of
// one CPU, and 10 ms at once. A busy engine's 400 events a second cost it 1-2 ms a
// second, so a hundred such engines stay under a quarter; the soak's flooding peer at
// --lmcache-peer-rate costs it some 40 ms a second.
const (
	DefaultIngestCPU      = 0.25
	DefaultIngestCPUBurst = 10 * time.Millisecond

	// maxIngestWait is the longest one pause of the pull loop: it then reads one more
	// message, so a close or a quiet spell is noticed soon.
	maxIngestWait = 50 * time.Millisecond
)

// ingestBudget is a token bucket of the pull loop's CPU seconds: each message's receive
// and ingestion is charged what it took of the loop's thread, and a loop in debt pauses
// (it stops reading, so the ZeroMQ queue fills to its high-water mark and the senders
// block) until the debt is repaid. Used by one goroutine; a nil budget never pauses.
type ingestBudget struct {
	b tokenbucket.Bucket
}

// newIngestBudget returns a budget of share of one CPU with burst at once, or nil when
// share is not positive (no budget).
func newIngestBudget(share float64, burst time.Duration, now time.Time) *ingestBudget {
	if share <= 0 {
		return nil
	}
	return &ingestBudget{b: tokenbucket.New(share, burst.Seconds(), now)}
}

// charge takes cpu from the budget at now and returns how long the loop must pause: 0
// within the budget, else until the debt is repaid, at most maxIngestWait.
func (g *ingestBudget) charge(cpu time.Duration, now time.Time) time.Duration {
	if g == nil {
		return 0
	}
	g.b.Refill(now)
	g.b.Take(cpu.Seconds())
	return min(g.b.Until(0), maxIngestWait)
}
