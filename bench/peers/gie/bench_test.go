package gie

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkPick measures one request through GIE's pipeline (parse, prefix lookup,
// default profile, prefix index update) plus Done, on an 8-endpoint fleet with a
// ~2 KB prompt sharing its first half with the previous requests.
func BenchmarkPick(b *testing.B) {
	fleet := make([]string, 8)
	snap := map[string]Metrics{}
	for i := range fleet {
		fleet[i] = fmt.Sprintf("10.0.0.%d:8000", i+1)
		snap[fleet[i]] = Metrics{Waiting: i % 3, Running: 4, KVCacheUsage: 0.1 * float64(i)}
	}
	p, err := New(fleet, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	shared := strings.Repeat("shared system prompt text ", 40)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprint(i)
		req := CompletionRequest(id, "m", shared+fmt.Sprintf("question %d: %s", i, strings.Repeat("q", 1000)))
		if _, err := p.Pick(req, snap); err != nil {
			b.Fatal(err)
		}
		if err := p.Done(id); err != nil {
			b.Fatal(err)
		}
	}
}
