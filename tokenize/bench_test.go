package tokenize

import (
	"runtime"
	"strings"
	"testing"
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
