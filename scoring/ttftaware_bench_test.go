package scoring

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkTTFTAwareRank ranks 256 candidates, with the engines not scraped (the
// estimate without its KV wait) and scraped near a full pool (every candidate's KV wait
// computed), in reused scratch memory: the ranking allocates nothing.
func BenchmarkTTFTAwareRank(b *testing.B) {
	for _, scraped := range []bool{false, true} {
		b.Run("scraped="+strconv.FormatBool(scraped), func(b *testing.B) {
			st := NewState()
			cands := make([]Candidate, 256)
			for i := range cands {
				addr := "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + ":8000"
				cands[i] = Candidate{Addr: addr, Matched: (i % 7) * 256, HolderRank: -1, Prefill: i % 3, Decode: i % 20, DecodePace: 10 * time.Second}
				if scraped {
					cands[i].Engine = EngineMetrics{Known: true, Running: i%20 + 1, Waiting: i % 2, KVUsage: 0.97, Age: 20 * time.Millisecond}
				}
				st.Uncached(addr, 100+i)
			}
			p := mustNew(b, "ttftaware", DefaultParams(), st)
			in := Input{PromptTokens: 1578, Now: t0, Candidates: cands, Sorted: true, Scratch: make([]Ranked, 0, len(cands))}
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
