package main

import (
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/kvindex"
)

func TestParseCacheSource(t *testing.T) {
	ep := "--endpoints=10.0.0.1:8000"
	tests := []struct {
		name              string
		args              []string
		source            string
		lmcache, kvEvents bool
		port, replay      int
		topic             string
		credits           kvindex.Credits
		remote            kvindex.RemotePolicy
		extraKeys         bool
	}{
		{"default: LMCache only", []string{ep}, "lmcache", true, false, 0, 0, "", kvindex.Credits{}, 0, false},
		{"vllm-events: no LMCache controller, vLLM defaults", []string{ep, "--cache-source", "vllm-events"}, "vllm-events", false, true, 5557, 0, "", kvindex.DefaultCredits(), kvindex.RemoteRefuse, false},
		{"both, with llm-d's ports and topic", []string{ep, "--cache-source", "both", "--kv-events-port", "5556", "--kv-events-replay-port", "5557", "--kv-events-topic", "kv@", "--kv-events-medium-credit", "CPU=0.5"},
			"both", true, true, 5556, 5557, "kv@", kvindex.Credits{GPU: 1, CPU: 0.5, Disk: 0.5, Storage: 0.5}, kvindex.RemoteRefuse, false},
		{"storage credit, remote credited, extra keys", []string{ep, "--cache-source", "vllm-events", "--kv-events-medium-credit", "GPU=1,CPU=0.9,STORAGE=0.25", "--kv-events-remote", "credit", "--kv-events-extra-keys"},
			"vllm-events", false, true, 5557, 0, "", kvindex.Credits{GPU: 1, CPU: 0.9, Disk: 0.5, Storage: 0.25}, kvindex.RemoteCredit, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := parse(tc.args, env())
			if err != nil {
				t.Fatal(err)
			}
			if cfg.CacheSource != tc.source || (cfg.LMCache != nil) != tc.lmcache || (cfg.KVEvents != nil) != tc.kvEvents {
				t.Fatalf("source %q, LMCache %v, KVEvents %+v", cfg.CacheSource, cfg.LMCache != nil, cfg.KVEvents)
			}
			if kv := cfg.KVEvents; kv != nil && (kv.Port != tc.port || kv.ReplayPort != tc.replay || kv.Topic != tc.topic || kv.Credits != tc.credits || kv.Remote != tc.remote || kv.ExtraKeys != tc.extraKeys) {
				t.Errorf("KVEvents = %+v", *kv)
			}
		})
	}
}

// --kv-events-dp-rank-metrics reaches the KV events config, off unless given.
func TestDPRankMetricsFlag(t *testing.T) {
	base := []string{"--endpoints=10.0.0.1:8000", "--cache-source", "vllm-events", "--kv-events-dp-size", "4"}
	for _, tc := range []struct {
		extra []string
		want  bool
	}{{nil, false}, {[]string{"--kv-events-dp-rank-metrics"}, true}} {
		cfg, _, err := parse(append(append([]string{}, base...), tc.extra...), env())
		if err != nil {
			t.Fatal(err)
		}
		if kv := cfg.KVEvents; kv == nil || kv.Ranks != 4 || kv.RankMetrics != tc.want {
			t.Errorf("%v: KVEvents = %+v, want 4 ranks and RankMetrics %v", tc.extra, kv, tc.want)
		}
	}
}

// --kv-events-max-blocks reaches the KV events config, kvindex.DefaultMaxBlocks unless given.
func TestKVEventsMaxBlocksFlag(t *testing.T) {
	base := []string{"--endpoints=10.0.0.1:8000", "--cache-source", "vllm-events"}
	for _, tc := range []struct {
		extra []string
		want  int
	}{{nil, kvindex.DefaultMaxBlocks}, {[]string{"--kv-events-max-blocks", "5000"}, 5000}, {[]string{"--kv-events-max-blocks", "-1"}, -1}} {
		cfg, _, err := parse(append(append([]string{}, base...), tc.extra...), env())
		if err != nil {
			t.Fatal(err)
		}
		if kv := cfg.KVEvents; kv == nil || kv.MaxBlocks != tc.want {
			t.Errorf("%v: KVEvents = %+v, want MaxBlocks %d", tc.extra, kv, tc.want)
		}
	}
}

func TestKVEventsFlagsRejected(t *testing.T) {
	ep := "--endpoints=10.0.0.1:8000"
	for _, args := range [][]string{
		{"--kv-events-remote", "maybe"},
		{"--kv-events-medium-credit", "TAPE=1"},
		{"--kv-events-medium-credit", "FS=0.5,OBJ=0.25"},
		{"--kv-events-max-blocks", "0"},
		{"--kv-events-max-blocks", "-2"},
	} {
		if _, _, err := parse(append([]string{ep, "--cache-source", "vllm-events"}, args...), env()); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestDPRankMetricsNeedsRanksOfKVEvents: the flag is refused, naming what it needs, where
// it could weigh nothing (LMCache alone, or one rank).
func TestDPRankMetricsNeedsRanksOfKVEvents(t *testing.T) {
	for _, args := range [][]string{
		{"--cache-source", "lmcache", "--kv-events-dp-rank-metrics"},
		{"--cache-source", "vllm-events", "--kv-events-dp-rank-metrics"},
		{"--cache-source", "vllm-events", "--kv-events-dp-size", "1", "--kv-events-dp-rank-metrics"},
	} {
		_, _, err := parse(append([]string{"--endpoints=10.0.0.1:8000"}, args...), env())
		if err == nil || !strings.Contains(err.Error(), "--kv-events-dp-size 2 or more") {
			t.Errorf("%v: err %v, want the flag refused with what it needs", args, err)
		}
	}
}
