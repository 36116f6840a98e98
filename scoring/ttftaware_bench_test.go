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

// BenchmarkTTFTAwareRankAndRecord is ttftaware's part of a decision on a fleet whose cache
// index shows nothing (no KV events): rank a 1,578-token prompt of a family sharing 1,400
// tokens, by the chunks routed before (presumeChunks), and record its booking
// (State.Uncached, State.RoutedPrompt: its chunks into the winner's chunkLRU), at 2 and 256
// endpoints, in reused scratch memory.
func BenchmarkTTFTAwareRankAndRecord(b *testing.B) {
	for _, n := range []int{2, 256} {
		b.Run("endpoints="+strconv.Itoa(n), func(b *testing.B) {
			st := NewState()
			cands := make([]Candidate, n)
			for i := range cands {
				cands[i] = Candidate{Addr: "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + ":8000", HolderRank: -1, Prefill: i % 3, Decode: i % 20, DecodePace: 10 * time.Second}
			}
			prompts := make([][]uint32, 64)
			for i := range prompts {
				prompts[i] = prompt(1578, 1400, uint32(i+1)<<20)
			}
			const key = 0x5eed
			p := mustNew(b, "ttftaware", DefaultParams(), st)
			in := Input{PromptTokens: 1578, PrefixKey: key, Candidates: cands, Sorted: true, Scratch: make([]Ranked, 0, len(cands))}
			decide := func(i int) {
				in.Tokens, in.Now = prompts[i%len(prompts)], t0.Add(time.Duration(i)*time.Millisecond)
				rs := p.Rank(in)
				st.Uncached(rs[0].Addr, in.PromptTokens-max(rs[0].Matched, rs[0].Presumed))
				st.RoutedPrompt(key, rs[0].Addr, in.Tokens, in.Now)
			}
			for i := range 256 {
				decide(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				decide(256 + i)
			}
		})
	}
}
