package picker

import (
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/tokenbucket"
)

// Defaults of the CPU budget of large tokenizations (Options.LargeTokenizeCPU, decision
// 1211). An ordinary long prompt over LargePromptBytes (16k-32k tokens of text, the
// tournament's long profile) costs 2-4 ms to encode, so half a CPU serves some 125-250 of
// them a second: the long prompts of 100-200 engines at the long profile's 1.25 a second
// each, or of 42-83 engines at 3 a second, every request large. A worst-shape prompt costs
// 40-60 ms: the budget holds a run of them to 8-12 a second, where the large-tokenization
// slots alone let them hold a core each. 100 ms at once lets a burst of 25-50 ordinary long
// prompts through a bucket that was full.
const (
	DefaultLargeTokenizeCPU   = 0.5
	DefaultLargeTokenizeBurst = 100 * time.Millisecond
)

// largeBudget is a token bucket of CPU seconds for the tokenizations of prompts of
// LargePromptBytes or more: each is charged the CPU time its tokenizer took on the calling
// OS thread, and while the bucket is in debt a large prompt is not tokenized (routed on load
// alone) until the rate has repaid it. Safe for concurrent use; a nil budget never refuses
// and charges nothing.
type largeBudget struct {
	mu sync.Mutex
	b  tokenbucket.Bucket
}

// newLargeBudget returns a budget of share of one CPU with burst at once, full at now, or
// nil when share is not positive (no budget).
func newLargeBudget(share float64, burst time.Duration, now time.Time) *largeBudget {
	if share <= 0 {
		return nil
	}
	return &largeBudget{b: tokenbucket.New(share, burst.Seconds(), now)}
}

// inDebt reports whether the budget owes CPU time at now: a large prompt is then refused.
// A budget exactly at zero is not in debt.
func (g *largeBudget) inDebt(now time.Time) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.b.Refill(now)
	return g.b.Tokens() < 0
}

// charge takes cpu from the budget at now, into debt if need be.
func (g *largeBudget) charge(cpu time.Duration, now time.Time) {
	if g == nil || cpu <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.b.Refill(now)
	g.b.Take(cpu.Seconds())
}
