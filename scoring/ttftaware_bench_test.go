package scoring

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkTTFTAwareRank ranks 256 candidates, with the engines not scraped (the
// estimate without its KV wait), scraped near a full pool (every candidate's KV wait
// computed), and with an index that shows none of the prompt, whose prefix key was routed
// before with another prompt of its family (the presumption looked up, the two prompts'
// tokens compared), in reused scratch memory: the ranking allocates nothing.
func BenchmarkTTFTAwareRank(b *testing.B) {
	for _, bc := range []struct {
		name             string
		scraped, presume bool
	}{{"scraped=false", false, false}, {"scraped=true", true, false}, {"presumed", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			st := NewState()
			cands := make([]Candidate, 256)
			for i := range cands {
				addr := "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + ":8000"
				cands[i] = Candidate{Addr: addr, Matched: (i % 7) * 256, HolderRank: -1, Prefill: i % 3, Decode: i % 20, DecodePace: 10 * time.Second}
				if bc.presume {
					cands[i].Matched = 0
				}
				if bc.scraped {
					cands[i].Engine = EngineMetrics{Known: true, Running: i%20 + 1, Waiting: i % 2, KVUsage: 0.97, Age: 20 * time.Millisecond}
				}
				st.Uncached(addr, 100+i)
			}
			const key = 0x5eed
			st.RoutedPrompt(key, cands[100].Addr, prompt(1578, 1400, 1<<20), t0)
			p := mustNew(b, "ttftaware", DefaultParams(), st)
			in := Input{PromptTokens: 1578, PrefixKey: key, Now: t0, Candidates: cands, Sorted: true, Scratch: make([]Ranked, 0, len(cands)),
				Tokens: prompt(1578, 1400, 2<<20)}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if rs := p.Rank(in); len(rs) == 0 {
					b.Fatal("nothing ranked")
				}
			}
		})
	}
}
