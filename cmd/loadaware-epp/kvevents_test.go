package main

import (
	"testing"

	"github.com/loadaware/loadaware-epp/kvevents"
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
		credits           kvevents.Credits
	}{
		{"default: LMCache only", []string{ep}, "lmcache", true, false, 0, 0, "", kvevents.Credits{}},
		{"vllm-events: no LMCache controller, vLLM defaults", []string{ep, "--cache-source", "vllm-events"}, "vllm-events", false, true, 5557, 0, "", kvevents.DefaultCredits()},
		{"both, with llm-d's ports and topic", []string{ep, "--cache-source", "both", "--kv-events-port", "5556", "--kv-events-replay-port", "5557", "--kv-events-topic", "kv@", "--kv-events-medium-credit", "CPU=0.5"},
			"both", true, true, 5556, 5557, "kv@", kvevents.Credits{GPU: 1, CPU: 0.5, Disk: 0.5}},
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
			if kv := cfg.KVEvents; kv != nil && (kv.Port != tc.port || kv.ReplayPort != tc.replay || kv.Topic != tc.topic || kv.Credits != tc.credits) {
				t.Errorf("KVEvents = %+v", *kv)
			}
		})
	}
}
