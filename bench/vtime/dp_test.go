package vtime

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/workload"
	"github.com/loadaware/loadaware-epp/picker"
)

// dpConfig is one server of 2 data-parallel ranks, cold, its caches learnt from vLLM's
// KV events (which name the rank).
func dpConfig() experiment.Config {
	cfg := experiment.DefaultConfig()
	cfg.Engines, cfg.Slowdowns, cfg.DPRanks = 1, nil, 2
	cfg.CacheSource = picker.SourceVLLMEvents
	cfg.Protocol, cfg.Warmup = experiment.ProtocolPerSeed, 0
	cfg.Arms = []experiment.Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "kvaware+ranks", Policy: "kvaware", Ranks: true}}
	cfg.Seeds = []uint64{1}
	return cfg
}

// Prompts A and B arrive together (A takes rank 0, B rank 1, whoever balances them);
// B again, alone, later: an arm that tells the ranks apart pins it to rank 1, which
// holds it in its GPU; vLLM's balancer sends it to idle rank 0, which does not.
func TestRanksArmPinsToTheHolderRank(t *testing.T) {
	prompt := func(tag uint32) []uint32 {
		out := make([]uint32, 1024)
		for i := range out {
			out[i] = tag*10000 + uint32(i)
		}
		return out
	}
	reqs := []workload.Request{
		{Index: 0, Tokens: prompt(1), MaxTokens: 4},
		{Index: 1, Tokens: prompt(2), MaxTokens: 4},
		{Index: 2, Tokens: prompt(2), MaxTokens: 4, SendAt: 5 * time.Second},
	}
	cfg := dpConfig()
	for _, tc := range []struct {
		arm    experiment.Arm
		cached bool // the third request finds B in the GPU cache
	}{{cfg.Arms[0], false}, {cfg.Arms[1], true}} {
		t.Run(tc.arm.Name, func(t *testing.T) {
			run, err := RunRequests(context.Background(), cfg, tc.arm, 1, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, row := range run.Rows {
				if row.Status != "ok" {
					t.Fatalf("row %d: %q", i, row.Status)
				}
			}
			if got := run.Rows[2].CachedTokens > 0; got != tc.cached {
				t.Errorf("B's repeat found %d tokens in the GPU cache; want a hit: %v", run.Rows[2].CachedTokens, tc.cached)
			}
		})
	}
}

func TestRanksArmNeedsRanksAndKVEvents(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*experiment.Config)
	}{
		{"no ranks", func(c *experiment.Config) { c.DPRanks = 0 }},
		{"LMCache events", func(c *experiment.Config) { c.CacheSource = picker.SourceLMCache }},
	} {
		cfg := dpConfig()
		tc.edit(&cfg)
		if _, err := RunOne(context.Background(), cfg, cfg.Arms[1], 1); err == nil || !strings.Contains(err.Error(), "data-parallel") {
			t.Errorf("%s: err = %v, want one naming the data-parallel ranks", tc.name, err)
		}
	}
	cfg := dpConfig()
	if _, err := WarmUp(context.Background(), cfg, cfg.Arms[0], 1); err == nil {
		t.Error("WarmUp of data-parallel engines (for the live mode) succeeded")
	}
}
