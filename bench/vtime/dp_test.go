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

// With Config.Pickers replicas the requests are routed by each in turn, and each sees
// what the others have in flight as its endpoints' remote load; a count outside
// 0..MaxPickers is refused.
func TestPickerReplicasShareEndpointLoads(t *testing.T) {
	cfg := dpConfig()
	cfg.Engines, cfg.Slowdowns = 2, nil
	cfg.Pickers = 2
	w := &world{cfg: cfg, addrs: experiment.Addrs(2)}
	var err error
	if w.hasher, err = hasherFor(cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.build(cfg.Arms[1], 0); err != nil {
		t.Fatal(err)
	}
	if len(w.replicas) != 2 || w.replicas[0].picker != w.picker || w.replicas[1].fleet == w.fleet {
		t.Fatalf("replicas %+v: want 2, the first the world's picker, each on its own fleet", w.replicas)
	}
	b, err := w.replicas[1].fleet.Book(w.addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	w.shareLoads(w.replicas[0].fleet)
	for i, want := range []int{0, 1} {
		if got := w.replicas[0].fleet.Loads(w.addrs[i : i+1])[0].InFlight(); got != want {
			t.Errorf("replica 0 sees %d in flight on %s, want %d (replica 1's booking)", got, w.addrs[i], want)
		}
	}
	if got := w.replicas[1].fleet.Loads(w.addrs[1:2])[0].InFlight(); got != 1 {
		t.Errorf("replica 1 sees %d in flight on its own booking's endpoint, want 1", got)
	}
	for _, n := range []int{-1, experiment.MaxPickers + 1} {
		bad := dpConfig()
		bad.Pickers = n
		if _, err := RunOne(context.Background(), bad, bad.Arms[0], 1); err == nil || !strings.Contains(err.Error(), "picker replicas") {
			t.Errorf("Pickers %d: err = %v, want one naming the picker replicas", n, err)
		}
	}
}
