package picker

import (
	"context"
	"strings"
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
	want := `
# HELP loadaware_routed_matched_tokens_total Of loadaware_routed_prompt_tokens_total, the tokens the chosen endpoint already held as a cached prefix (hit share = matched / prompt).
# TYPE loadaware_routed_matched_tokens_total counter
loadaware_routed_matched_tokens_total{endpoint="10.0.0.2:8000",source="test-source"} 512
# HELP loadaware_routed_prompt_tokens_total Prompt tokens of requests routed with token ids, by chosen endpoint and cache source.
# TYPE loadaware_routed_prompt_tokens_total counter
loadaware_routed_prompt_tokens_total{endpoint="10.0.0.2:8000",source="test-source"} 400
`
	names := []string{"loadaware_routed_matched_tokens_total", "loadaware_routed_prompt_tokens_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	p.Forget([]string{"10.0.0.1:8000"}) // 10.0.0.2 left the fleet: its series go
	if n := testutil.CollectAndCount(reg, names...); n != 0 {
		t.Fatalf("%d series left after the endpoint left, want 0", n)
	}
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
