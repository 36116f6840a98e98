package replica

import (
	"fmt"
	"strings"
	"testing"
)

// vllmPage is a /metrics page shaped like a vLLM engine's: the two gauges the scraper reads
// among counters and ten 30-bucket histograms (about 400 lines).
func vllmPage() []byte {
	var b strings.Builder
	const label = `{engine="0",model_name="Qwen/Qwen2.5-3B-Instruct"}`
	for _, g := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} {
		fmt.Fprintf(&b, "# HELP %s A gauge.\n# TYPE %s gauge\n%s%s 3.0\n", g, g, g, label)
	}
	for _, c := range []string{"vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions"} {
		fmt.Fprintf(&b, "# HELP %s_total A counter.\n# TYPE %s_total counter\n%s_total%s 123456.0\n", c, c, c, label)
	}
	for h := range 10 {
		name := fmt.Sprintf("vllm:histogram_%d_seconds", h)
		fmt.Fprintf(&b, "# HELP %s A histogram.\n# TYPE %s histogram\n", name, name)
		for i := range 30 {
			fmt.Fprintf(&b, "%s_bucket{engine=\"0\",le=\"%g\",model_name=\"Qwen/Qwen2.5-3B-Instruct\"} %d.0\n", name, 0.001*float64(int(1)<<i), 10*i)
		}
		fmt.Fprintf(&b, "%s_bucket{engine=\"0\",le=\"+Inf\",model_name=\"Qwen/Qwen2.5-3B-Instruct\"} 300.0\n%s_count%s 300.0\n%s_sum%s 12.5\n", name, name, label, name, label)
	}
	return []byte(b.String())
}

// BenchmarkParseEngineLoad measures reading one engine's page, as the scraper does every
// scrape interval for every endpoint.
func BenchmarkParseEngineLoad(b *testing.B) {
	page := vllmPage()
	if n, err := ParseEngineLoad(page); err != nil || n != 6 {
		b.Fatalf("ParseEngineLoad = %d, %v; want 6", n, err)
	}
	b.SetBytes(int64(len(page)))
	for b.Loop() {
		if _, err := ParseEngineLoad(page); err != nil {
			b.Fatal(err)
		}
	}
}
