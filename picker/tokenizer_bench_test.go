package picker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/tokenize"
)

// BenchmarkPickText1578 is one decision for a ~1,578-token text prompt end to end inside
// the picker: Qwen2.5 tokenizing (warm piece cache: the prompt shares its prefix with the
// previous ones, as routed traffic does), chunk keys and the LMCache index lookup over 2
// endpoints holding the prefix, ranking and booking; for loadaware, latencyaware and (warm)
// ttftaware, with the decisions' p50 and p99.
func BenchmarkPickText1578(b *testing.B) {
	for _, c := range []struct{ cache, policy string }{{"warm", "loadaware"}, {"warm", "latencyaware"}, {"warm", "ttftaware"}, {"cold", "loadaware"}, {"cold", "latencyaware"}} {
		cache := c.cache
		b.Run("piece-cache="+cache+"/policy="+c.policy, func(b *testing.B) {
			qwen := loadQwenB(b)
			if cache == "cold" {
				var err error
				if qwen, err = tokenize.LoadWith("../testdata/ext/qwen2_5", tokenize.Options{CacheEntries: -1}); err != nil {
					b.Fatal(err)
				}
			}
			keys := lmcache.KeyConfig{HashSeed: "123", ChunkSize: 256, Format: lmcache.KeyFormatV03}
			idx, err := lmcache.NewIndex(lmcache.IndexConfig{Keys: keys})
			if err != nil {
				b.Fatal(err)
			}
			words := strings.Fields("the quick brown fox jumps over a lazy dog while engines cache prefixes of long prompts for routing")
			var sb strings.Builder
			for i := 0; sb.Len() < 8450; i++ {
				sb.WriteString(words[(i*7)%len(words)] + " ")
			}
			prefix := sb.String()
			ids := qwen.Encode(prefix, true)
			h, _ := lmcache.NewHasher(keys)
			for i, inst := range []string{"a", "b"} {
				ip := fmt.Sprintf("10.0.0.%d", i+1)
				if err := idx.Apply(lmcache.RegisterMsg{InstanceID: inst, IP: ip, Port: 8000}, benchNow); err != nil {
					b.Fatal(err)
				}
				for _, k := range h.ChunkKeys(ids) {
					if err := idx.Apply(lmcache.KVAdmitMsg{InstanceID: inst, Key: k, Location: "LocalCPUBackend"}, benchNow); err != nil {
						b.Fatal(err)
					}
				}
			}
			p := newPicker(b, Options{Fleet: newFleet("10.0.0.1:8000", "10.0.0.2:8000"), Cache: LMCacheView{Index: idx},
				Tokenizer: &Tokens{Local: qwen}, Policy: c.policy})
			prompts := make([]string, 64)
			for i := range prompts {
				prompts[i] = prefix + fmt.Sprintf("\n[Q-%06d] What does the passage above say about item %d?", i, i)
			}
			d, err := p.Pick(context.Background(), Request{Prompt: prompts[0]})
			if err != nil {
				b.Fatal(err)
			}
			if d.PromptTokens < 1500 || d.Ranked[0].Matched < 1280 {
				b.Fatalf("prompt of %d tokens matched %d: the benchmark is not measuring a cache hit", d.PromptTokens, d.Ranked[0].Matched)
			}
			d.Booking.Release()
			tokens := d.PromptTokens
			i := 0
			timeEach(b, func() func() {
				d, err := p.Pick(context.Background(), Request{Prompt: prompts[i%len(prompts)]})
				i++
				if err != nil {
					b.Fatal(err)
				}
				return func() { d.Booking.Release() }
			})
			b.ReportMetric(float64(tokens), "prompt-tokens")
		})
	}
}

func loadQwenB(b *testing.B) *tokenize.Tokenizer {
	b.Helper()
	tok, err := tokenize.Load("../testdata/ext/qwen2_5")
	if err != nil {
		b.Fatalf("%v (run make testdata)", err)
	}
	return tok
}

var benchNow = time.Unix(1700000000, 0)

// BenchmarkWorstCasePrompt tokenizes prompts of the shape issue 10 found most expensive
// (one run of whitespace) and ordinary text, at the sizes around --max-prompt-bytes, to
// size its default: the ns/byte figure times the bound is the worst CPU one request costs.
func BenchmarkWorstCasePrompt(b *testing.B) {
	qwen := loadQwenB(b)
	for _, kind := range []string{"whitespace", "text"} {
		for _, n := range []int{64 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("%s/bytes=%d", kind, n), func(b *testing.B) {
				var s string
				if kind == "whitespace" {
					s = strings.Repeat(" ", n)
				} else {
					s = strings.Repeat("the quick brown fox jumps over a lazy dog ", n/42+1)[:n]
				}
				b.SetBytes(int64(n))
				i := 0
				for b.Loop() {
					i++
					qwen.Encode(fmt.Sprint(i)+s, false) // a new string each time: no piece-cache hit
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/byte")
			})
		}
	}
}
