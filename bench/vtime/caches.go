package vtime

import (
	"fmt"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
)

// kvSource feeds the engines' CPU tiers, as vLLM KV events, into a kvevents
// index in-process (the live engines publish the same events over ZeroMQ).
type kvSource struct {
	index  *kvindex.Index
	events *experiment.ChunkEvents
}

// newKVSource returns the source, or nil when source does not use vLLM events.
func newKVSource(source string, chunk int) (*kvSource, error) {
	if source != picker.SourceVLLMEvents && source != picker.SourceBoth {
		return nil, nil
	}
	ix, err := kvindex.NewIndex(kvindex.IndexConfig{Seed: 0x6b766576656e7473})
	if err != nil {
		return nil, fmt.Errorf("vtime: vLLM KV events index: %w", err)
	}
	return &kvSource{index: ix, events: experiment.NewChunkEvents(chunk)}, nil
}

func (k *kvSource) learn(tokens []uint32, keys []int64) { k.events.Learn(tokens, keys) }

// apply applies one engine step's CPU-tier changes as one batch of
// endpoint's data-parallel rank rank (-1: None, an engine without ranks).
func (k *kvSource) apply(endpoint string, rank int, evs []sim.KVEvent) {
	if out := k.events.Events(evs); len(out) > 0 {
		k.index.Apply(endpoint, kvindex.Batch{Events: out, DPRank: rank})
	}
}

// streamRank is the data_parallel_rank a rank's events carry: its rank when
// the engines run ranks, None (-1) when not.
func (w *world) streamRank(rank int) int {
	if w.cfg.DPRanks > 1 {
		return rank
	}
	return -1
}

// cacheView returns the picker's cache view for source.
func (w *world) cacheView(source string) picker.CacheView {
	lm := picker.LMCacheView{Index: w.index}
	switch source {
	case picker.SourceVLLMEvents:
		return picker.KVEventsView{Index: w.kv.index, Ranks: w.ranks}
	case picker.SourceBoth:
		return picker.Longest{lm, picker.KVEventsView{Index: w.kv.index, Ranks: w.ranks}}
	}
	return lm
}

// register announces every engine's LMCache worker to the index, as LMCache
// 0.3.9 does at start-up (RegisterMsg on the pull channel).
func register(ix *lmcache.Index, addrs []string, at time.Time) error {
	for i, a := range addrs {
		url := fmt.Sprintf("%s:%d", fleet.IP(a), 30081)
		msg := lmcache.RegisterMsg{InstanceID: experiment.InstanceID(i), WorkerID: 0, IP: fleet.IP(a), Port: 8001, DistributedURL: &url}
		if err := ix.Apply(msg, at); err != nil {
			return fmt.Errorf("vtime: register engine %s: %w", a, err)
		}
	}
	return nil
}
