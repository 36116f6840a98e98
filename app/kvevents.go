package app

import (
	"fmt"
	"time"

	"github.com/loadaware/loadaware-epp/kvevents"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/replica"
	"github.com/prometheus/client_golang/prometheus"
)

// KVEventsConfig configures the vLLM KV events cache source.
type KVEventsConfig struct {
	Port       int    // the engines' KV events PUB port (vLLM default 5557)
	ReplayPort int    // the engines' replay ROUTER port; 0: no replay
	Topic      string // topic prefix filter; empty: every topic
	Ranks      int    // data-parallel ranks per endpoint (rank r on Port+r); 0: 1
	// RankMetrics has the rank choice weigh each rank's scraped load (vLLM's gauges by
	// engine label) besides this picker's bookings (picker.Options.RankMetrics).
	RankMetrics   bool
	Credits       kvindex.Credits
	Remote        kvindex.RemotePolicy // what REMOTE blocks get
	ExtraKeys     bool                 // index LoRA and cache_salt blocks under their own key
	ReplayTimeout time.Duration        // 0: 2 s
	// MaxBlocks bounds the blocks each endpoint rank holds in the index
	// (kvindex.IndexConfig.MaxBlocks): 0, kvindex.DefaultMaxBlocks; negative, no bound.
	MaxBlocks int
}

// newKVEvents creates the vLLM KV events index and subscriber and puts the cache view
// chosen by cfg.CacheSource in cfg.Cache.
func (a *App) newKVEvents(cfg *Config, reg prometheus.Registerer) error {
	c := *cfg.KVEvents
	switch {
	case cfg.CacheSource == picker.SourceBoth && a.LMCacheIndex == nil:
		return fmt.Errorf("cache source both needs the LMCache controller: set --lmcache-pull-port, or use --cache-source vllm-events")
	case cfg.CacheSource != picker.SourceBoth && cfg.CacheSource != picker.SourceVLLMEvents:
		return fmt.Errorf("vLLM KV events are configured but the cache source is %q: use --cache-source vllm-events or both", cfg.CacheSource)
	}
	var err error
	if a.KVEventsIndex, err = kvindex.NewIndex(kvindex.IndexConfig{Credits: c.Credits, Remote: c.Remote, ExtraKeys: c.ExtraKeys, MaxBlocks: c.MaxBlocks, Registerer: reg}); err != nil {
		return err
	}
	sc := kvevents.SubscriberConfig{Port: c.Port, ReplayPort: c.ReplayPort,
		Topic: c.Topic, Ranks: c.Ranks, ReplayTimeout: c.ReplayTimeout, OnBatch: a.onKVBatch, Logger: a.log, Registerer: reg}
	if cfg.Replicas != nil { // a starting replica takes each stream from a peer, else replays it (decision 0850)
		a.kvSnapshots = replica.NewKVSnapshots()
		sc.Snapshots = a.kvSnapshots
	}
	if a.KVEventsSubscriber, err = kvevents.NewSubscriber(sc, a.KVEventsIndex); err != nil {
		return err
	}
	var view picker.CacheView = picker.KVEventsView{Index: a.KVEventsIndex, Ranks: c.Ranks}
	if cfg.CacheSource == picker.SourceBoth {
		view = picker.Longest{picker.LMCacheView{Index: a.LMCacheIndex}, view}
	}
	cfg.Cache = view
	a.log.Info("vLLM KV events source configured", "cache_source", cfg.CacheSource, "port", c.Port, "replay_port", c.ReplayPort,
		"topic", c.Topic, "dp_ranks", max(c.Ranks, 1), "medium_credit", c.Credits.String(), "remote", c.Remote.String(), "extra_keys", c.ExtraKeys)
	return nil
}

// kvEventsReady is closed once the KV events index holds what the engines' replays
// offered at start (at once without the KV events source).
func (a *App) kvEventsReady() <-chan struct{} {
	if a.KVEventsSubscriber == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return a.KVEventsSubscriber.Ready()
}
