package tokenize

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/loadaware/loadaware-epp/internal/threadcpu"
)

// benchText is ~64 KiB of mixed natural text and code.
var benchText = func() string {
	var b strings.Builder
	for i := 0; b.Len() < 64<<10; i++ {
		b.WriteString(naturalText[i%len(naturalText)])
		b.WriteString("\n")
		b.WriteString(codeText[i%len(codeText)])
	}
	return b.String()
}()

func benchEncode(b *testing.B, opts Options, warm bool) {
	dir := requireTestdata(b, "qwen2_5")
	tk, err := LoadWith(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	n := len(tk.Encode(benchText, false))
	if !warm && tk.cache != nil {
		b.Fatal("cold benchmark with a cache")
	}
	b.SetBytes(int64(len(benchText)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk.Encode(benchText, false)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncodeCold encodes without the piece cache: every piece goes through BPE.
func BenchmarkEncodeCold(b *testing.B) { benchEncode(b, Options{CacheEntries: -1}, false) }

// BenchmarkEncodeWarm encodes text whose pieces are all in the cache (repeated prefixes).
func BenchmarkEncodeWarm(b *testing.B) { benchEncode(b, Options{}, true) }

// BenchmarkLoadQwen25 measures Load of the Qwen2.5 tokenizer and the heap it keeps.
func BenchmarkLoadQwen25(b *testing.B) {
	dir := requireTestdata(b, "qwen2_5")
	for i := 0; i < b.N; i++ {
		if _, err := Load(dir); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tk, err := Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
	runtime.KeepAlive(tk)
}

// decisionText is the picker's 1,559-token decision prompt (BenchmarkPickText1578): about
// 8,450 bytes of 20 repeated words with a per-request question appended.
func decisionText(i int) string {
	words := strings.Fields("the quick brown fox jumps over a lazy dog while engines cache prefixes of long prompts for routing")
	var sb strings.Builder
	for j := 0; sb.Len() < 8450; j++ {
		sb.WriteString(words[(j*7)%len(words)] + " ")
	}
	return sb.String() + fmt.Sprintf("\n[Q-%06d] What does the passage above say about item %d?", i, i)
}

// BenchmarkEncodeDecision encodes the picker's 1,559-token decision prompt: warm (every
// piece cached by earlier prompts), cold (an empty piece cache: a new tokenizer's first
// request) and uncached (the cache disabled).
func BenchmarkEncodeDecision(b *testing.B) {
	dir := requireTestdata(b, "qwen2_5")
	for _, mode := range []string{"warm", "cold", "uncached"} {
		b.Run("cache="+mode, func(b *testing.B) {
			tk := loadCacheMode(b, dir, mode)
			prompts := make([]string, 64)
			for i := range prompts {
				prompts[i] = decisionText(i)
			}
			n := len(tk.Encode(prompts[0], true))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if mode == "cold" {
					b.StopTimer()
					tk.cache = newPieceCache(1 << 16)
					b.StartTimer()
				}
				tk.Encode(prompts[i%len(prompts)], true)
				i++
			}
			b.ReportMetric(float64(n), "prompt-tokens")
		})
	}
}

// BenchmarkEncode100k encodes a ~100,000-token prompt of mixed prose and code whose pieces
// are all cached.
func BenchmarkEncode100k(b *testing.B) {
	dir := requireTestdata(b, "qwen2_5")
	tk, err := Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	for sb.Len() < 284<<10 {
		sb.WriteString(benchText)
	}
	text := sb.String()[:284<<10] // about 2.8 bytes a token
	for !utf8.RuneStart(text[len(text)-1]) || text[len(text)-1] >= utf8.RuneSelf {
		text = text[:len(text)-1] // end on a whole rune
	}
	n := len(tk.Encode(text, true))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tk.Encode(text, true)
	}
	b.ReportMetric(float64(n), "prompt-tokens")
}

// longPieces are single pre-tokenized pieces of about 256 KiB (the default --max-prompt-bytes)
// that take the heap merge: runs of one byte (a run of spaces is the soak's worst-shape
// prompt), a run of a two-byte unit, and letters without a break (first candidates of many
// ranks, not in order).
func longPieces() map[string]string {
	const n = 256<<10 - 64
	var letters strings.Builder
	for i := 0; letters.Len() < n; i++ {
		letters.WriteByte("abcdefghijklmnopqrstuvwxyz"[i*7%26])
	}
	return map[string]string{
		"spaces":   strings.Repeat(" ", n),
		"newlines": strings.Repeat("\n", n),
		"a":        strings.Repeat("a", n),
		"ab":       strings.Repeat("ab", n/2),
		"letters":  letters.String(),
	}
}

// BenchmarkEncodeLongPiece merges one long piece (encodeHeap, the merge a worst-shape prompt
// spends its time in). Besides the wall clock it reports the calling thread's CPU time per
// byte (cpu-ns/byte), which a loaded host inflates far less (decision 1207).
func BenchmarkEncodeLongPiece(b *testing.B) {
	tk := loadRef(b, "qwen2_5")
	pieces := longPieces()
	for _, name := range []string{"spaces", "newlines", "a", "ab", "letters"} {
		piece := pieces[name]
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			b.SetBytes(int64(len(piece)))
			b.ReportAllocs()
			for b.Loop() {
				c0, _ := threadcpu.Now()
				tk.model.encodeHeap(piece, nil, nil)
				c1, _ := threadcpu.Now()
				cpu += c1 - c0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(len(piece)), "cpu-ns/byte")
		})
	}
}

// BenchmarkEncodeLongPrompt encodes ordinary long prompts (prose and code, benchText
// repeated) of the tournament's long-prompt sizes, 8k to 32k tokens (the long profile's
// prefixes; llmd-precise-doe-60x8k's 8k), with the piece cache warm (the pieces seen before,
// as in a fleet's traffic) and disabled (every piece merged: the upper bound). It reports
// the calling thread's CPU time per prompt (cpu-ms/prompt): what --large-tokenize-cpu
// charges such a prompt (decision 1211).
func BenchmarkEncodeLongPrompt(b *testing.B) {
	dir := requireTestdata(b, "qwen2_5")
	var sb strings.Builder
	for sb.Len() < 160<<10 {
		sb.WriteString(benchText)
	}
	all := sb.String()
	for _, mode := range []string{"warm", "uncached"} {
		tk := loadCacheMode(b, dir, mode)
		perToken := float64(len(benchText)) / float64(len(tk.Encode(benchText, false)))
		for _, tokens := range []int{8192, 16384, 32768} {
			text := all[:int(float64(tokens)*perToken)]
			for !utf8.RuneStart(text[len(text)-1]) || text[len(text)-1] >= utf8.RuneSelf {
				text = text[:len(text)-1]
			}
			n := len(tk.Encode(text, true))
			b.Run(fmt.Sprintf("cache=%s/tokens=%dk", mode, tokens>>10), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var cpu time.Duration
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					c0, _ := threadcpu.Now()
					tk.Encode(text, true)
					c1, _ := threadcpu.Now()
					cpu += c1 - c0
				}
				b.ReportMetric(float64(cpu.Nanoseconds())/1e6/float64(b.N), "cpu-ms/prompt")
				b.ReportMetric(float64(n), "prompt-tokens")
				b.ReportMetric(float64(len(text)), "prompt-bytes")
			})
		}
	}
}

// loadCacheMode loads the tokenizer in dir with its piece cache on, or off for mode
// "uncached".
func loadCacheMode(b *testing.B, dir, mode string) *Tokenizer {
	b.Helper()
	opts := Options{}
	if mode == "uncached" {
		opts.CacheEntries = -1
	}
	tk, err := LoadWith(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	return tk
}
