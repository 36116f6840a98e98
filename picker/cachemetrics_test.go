package picker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// namedCache is a mapCache that names its source.
type namedCache struct{ mapCache }

func (namedCache) CacheSource() string { return "test-source" }

func TestCacheShareMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p := newPicker(t, Options{
		Fleet: newFleet("10.0.0.1:8000", "10.0.0.2:8000"), Registerer: reg, Policy: "kvaware",
		Cache: namedCache{mapCache{"10.0.0.2:8000": {Matched: 256, HolderRank: 0}}},
	})
	for _, r := range []Request{
		{Tokens: make([]uint32, 300)}, // to the holder: 256 of 300 held
		{Tokens: make([]uint32, 100)}, // kvaware sends it to the holder again
		{Prompt: "no tokenizer"},      // no token ids: not counted
	} {
		if _, err := p.Pick(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"loadaware_routed_matched_tokens_total", "loadaware_routed_prompt_tokens_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(shareSeries("10.0.0.2:8000", "test-source", 512, 400)), names...); err != nil {
		t.Fatal(err)
	}
	p.Forget([]string{"10.0.0.1:8000"}) // 10.0.0.2 left the fleet: its series go
	if n := testutil.CollectAndCount(reg, names...); n != 0 {
		t.Fatalf("%d series left after the endpoint left, want 0", n)
	}
}

// shareSeries is the exposition of the cache-share counters with one endpoint's series.
func shareSeries(endpoint, source string, matched, prompt int) string {
	return fmt.Sprintf(`
# HELP loadaware_routed_matched_tokens_total Of loadaware_routed_prompt_tokens_total, the tokens the chosen endpoint already held as a cached prefix (hit share = matched / prompt).
# TYPE loadaware_routed_matched_tokens_total counter
loadaware_routed_matched_tokens_total{endpoint=%[1]q,source=%[2]q} %[3]d
# HELP loadaware_routed_prompt_tokens_total Prompt tokens of requests routed with token ids, by chosen endpoint and cache source.
# TYPE loadaware_routed_prompt_tokens_total counter
loadaware_routed_prompt_tokens_total{endpoint=%[1]q,source=%[2]q} %[4]d
`, endpoint, source, matched, prompt)
}

func TestCacheSourceNames(t *testing.T) {
	tests := []struct {
		view CacheView
		want string
	}{
		{NoCache{}, "none"},
		{LMCacheView{}, "lmcache"},
		{mapCache{}, "unnamed"},
		{namedCache{}, "test-source"},
	}
	for _, tt := range tests {
		if got := cacheSource(tt.view); got != tt.want {
			t.Errorf("cacheSource(%T) = %q, want %q", tt.view, got, tt.want)
		}
	}
}

// A decision that resolved an endpoint's children while the endpoint left the fleet may
// store children whose series forget deleted; the next decision must resolve them again,
// or the endpoint's counts would be lost for good once it came back.
func TestCacheShareResolvesChildrenAgainAfterForget(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := newCacheShare()
	for _, col := range c.collectors() {
		reg.MustRegister(col)
	}
	names := []string{"loadaware_routed_matched_tokens_total", "loadaware_routed_prompt_tokens_total"}
	c.routed("10.0.0.2:8000", "lmcache", 10, 5)
	stale, _ := c.seen.Load("10.0.0.2:8000")
	c.forget(nil)
	c.seen.Store("10.0.0.2:8000", stale) // as a decision racing the forget would leave it
	c.routed("10.0.0.2:8000", "lmcache", 300, 256)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(shareSeries("10.0.0.2:8000", "lmcache", 256, 300)), names...); err != nil {
		t.Fatal(err)
	}
}

func TestDecisionsCountedByPolicyAndReason(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []decisionKey{
		{"loadaware", "cache-affinity"}, {"loadaware", "load-balance"}, {"loadaware", "cache-affinity"},
		{"kvaware", "cache-affinity"}, {"loadaware", "cache-affinity"},
	} {
		m.decision(d.policy, d.reason)
	}
	want := `
# HELP loadaware_decisions_total Routing decisions by policy and by the reason the winner won.
# TYPE loadaware_decisions_total counter
loadaware_decisions_total{policy="kvaware",reason="cache-affinity"} 1
loadaware_decisions_total{policy="loadaware",reason="cache-affinity"} 3
loadaware_decisions_total{policy="loadaware",reason="load-balance"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loadaware_decisions_total"); err != nil {
		t.Fatal(err)
	}
}

func TestDecisionsCountedFromManyGoroutines(t *testing.T) {
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	reasons := []string{"cache-affinity", "load-balance", "load-only", "least-load"}
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				m.decision("loadaware", reasons[(g+i)%len(reasons)])
			}
		})
	}
	wg.Wait()
	total := 0.0
	for _, r := range reasons {
		total += testutil.ToFloat64(m.decisions.WithLabelValues("loadaware", r))
	}
	if total != goroutines*each {
		t.Fatalf("%v decisions counted, want %d", total, goroutines*each)
	}
}
