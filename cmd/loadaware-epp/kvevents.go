package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/picker"
)

// kvFlags are the flags of the cache source choice and the vLLM KV events source.
type kvFlags struct {
	source        string
	port, replay  int
	ranks         int
	rankMetrics   bool
	topic         string
	credit        string
	remote        string
	extraKeys     bool
	replayTimeout time.Duration
	maxBlocks     int
}

func (k *kvFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.source, "cache-source", picker.SourceLMCache, "where the picker learns what each engine caches: lmcache (the embedded LMCache controller), vllm-events (vLLM's KV cache events, --kv-events-config) or both (the longer prefix per endpoint wins)")
	fs.IntVar(&k.port, "kv-events-port", 5557, "the engines' vLLM KV events PUB port (the port of --kv-events-config endpoint); one SUB per endpoint IP")
	fs.IntVar(&k.replay, "kv-events-replay-port", 0, "the engines' KV events replay (ROUTER) port (replay_endpoint); 0: no replay, a lost batch drops that engine's entries")
	fs.IntVar(&k.ranks, "kv-events-dp-size", 1, "data-parallel ranks behind each endpoint: rank r publishes on --kv-events-port+r (and replays on --kv-events-replay-port+r), as vLLM offsets them; the endpoint gets its best rank's prefix, and the request is pinned (x-data-parallel-rank) to that rank unless it has more than one waiting request over the least loaded rank, then to that one")
	fs.BoolVar(&k.rankMetrics, "kv-events-dp-rank-metrics", false, "with --kv-events-dp-size over 1: weigh each rank's load as scraped from the engine's /metrics (vLLM's running and waiting gauges by engine label) besides this picker's bookings, so other picker replicas' requests count; off: the bookings alone (in the simulator the scrape cost TTFT p95, docs/decisions/0831)")
	fs.StringVar(&k.topic, "kv-events-topic", "", "topic prefix of the KV events to follow (vLLM's topic; default empty: all)")
	fs.StringVar(&k.credit, "kv-events-medium-credit", kvindex.DefaultCredits().String(), "fraction of a cached block credited per tier (GPU, CPU, DISK, STORAGE); a medium spelling sets its tier (CPU_PINNED and CPU_TIER1 are CPU, CPU_TIER2 and NVME DISK, FS, OBJ and SHARED_STORAGE STORAGE); blocks of an unknown medium are refused and counted")
	fs.StringVar(&k.remote, "kv-events-remote", "refuse", "blocks whose locality is REMOTE (not the publishing engine's own): refuse (not credited) or credit (credited to the publisher at their medium's tier; a REMOTE GPU block is refused either way)")
	fs.BoolVar(&k.extraKeys, "kv-events-extra-keys", false, "index blocks stored under a LoRA adapter or a cache_salt under a key of their own (matched only by requests with the same adapter and salt) instead of refusing them; multimodal and prompt-embeds blocks are refused either way")
	fs.IntVar(&k.maxBlocks, "kv-events-max-blocks", kvindex.DefaultMaxBlocks, "blocks the vLLM KV events index holds per endpoint rank (about 57 bytes each); beyond it that rank's least recently stored go first, other ranks' never; -1: no bound")
	fs.DurationVar(&k.replayTimeout, "kv-events-replay-timeout", 2*time.Second, "longest wait for one engine's replay (at start, the picker is ready only after every replay ended or timed out)")
}

// config returns the cache source, the LMCache controller config to use (nil when the
// source does not need it) and the KV events config (nil when not used).
func (k kvFlags) config(lm *app.LMCacheConfig) (string, *app.LMCacheConfig, *app.KVEventsConfig, error) {
	source, err := picker.ParseCacheSource(k.source)
	if err != nil {
		return "", nil, nil, fmt.Errorf("--cache-source: %v", err)
	}
	if k.rankMetrics && (source == picker.SourceLMCache || k.ranks < 2) {
		return "", nil, nil, fmt.Errorf("--kv-events-dp-rank-metrics weighs data-parallel ranks: it needs vLLM's KV events (--cache-source vllm-events or both) and --kv-events-dp-size 2 or more; drop it, or give those")
	}
	if source == picker.SourceLMCache {
		return source, lm, nil, nil
	}
	for _, p := range []struct {
		name string
		v    int
		zero bool
	}{{"kv-events-port", k.port, false}, {"kv-events-replay-port", k.replay, true}} {
		if p.v < 0 || p.v > 65535 || (p.v == 0 && !p.zero) {
			return "", nil, nil, fmt.Errorf("--%s %d is not a port: use 1-65535", p.name, p.v)
		}
	}
	if k.ranks < 1 || k.port+k.ranks-1 > 65535 || (k.replay != 0 && k.replay+k.ranks-1 > 65535) {
		return "", nil, nil, fmt.Errorf("--kv-events-dp-size %d: use 1 or more, with the ranks' ports (port + rank) at most 65535", k.ranks)
	}
	credits, err := kvindex.ParseCredits(k.credit)
	if err != nil {
		return "", nil, nil, fmt.Errorf("--kv-events-medium-credit: %v", err)
	}
	remote, err := kvindex.ParseRemotePolicy(k.remote)
	if err != nil {
		return "", nil, nil, fmt.Errorf("--kv-events-remote: %v", err)
	}
	if k.maxBlocks == 0 || k.maxBlocks < -1 {
		return "", nil, nil, fmt.Errorf("--kv-events-max-blocks %d: use a count of blocks per endpoint rank (default %d) or -1 for no bound", k.maxBlocks, kvindex.DefaultMaxBlocks)
	}
	if k.replayTimeout <= 0 {
		return "", nil, nil, fmt.Errorf("--kv-events-replay-timeout %v: use a positive duration such as 2s", k.replayTimeout)
	}
	kv := &app.KVEventsConfig{Port: k.port, ReplayPort: k.replay, Topic: k.topic, Ranks: k.ranks, RankMetrics: k.rankMetrics, Credits: credits, Remote: remote, ExtraKeys: k.extraKeys, ReplayTimeout: k.replayTimeout, MaxBlocks: k.maxBlocks}
	if source == picker.SourceVLLMEvents {
		return source, nil, kv, nil // no LMCache controller: its ports stay free
	}
	if lm == nil {
		return "", nil, nil, fmt.Errorf("--cache-source both needs the LMCache controller: drop --lmcache-pull-port 0, or use --cache-source vllm-events")
	}
	return source, lm, kv, nil
}
