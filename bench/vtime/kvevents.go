package vtime

import (
	"fmt"

	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/kvevents"
	"github.com/loadaware/loadaware-epp/picker"
)

// kvSource publishes the engines' LMCache CPU tiers as vLLM KV cache events into
// a kvevents index, as LMCache's multi-process mode does (medium CPU, one
// 256-token block per chunk, the chunk key as the engine's hash, the previous
// chunk as parent) and as the live engines do (bench/live/kvevents.go). A
// prompt's trailing partial chunk is not published: vLLM's events carry full
// blocks only.
type kvSource struct {
	index  *kvevents.Index
	chunk  int
	chunks map[int64]kvChunk // chunk key -> its tokens and parent, from the prompts sent
}

type kvChunk struct {
	tokens    []uint32
	parent    int64
	hasParent bool
}

// newKVSource returns the source for policy's picker, or nil when source does
// not use vLLM events.
func newKVSource(source string, chunk int) (*kvSource, error) {
	if source != picker.SourceVLLMEvents && source != picker.SourceBoth {
		return nil, nil
	}
	ix, err := kvevents.NewIndex(kvevents.IndexConfig{Seed: 0x6b766576656e7473})
	if err != nil {
		return nil, fmt.Errorf("vtime: vLLM KV events index: %w", err)
	}
	return &kvSource{index: ix, chunk: chunk, chunks: map[int64]kvChunk{}}, nil
}

// learn records the content of a prompt's full chunks, so that their stores can
// be published with their tokens.
func (k *kvSource) learn(tokens []uint32, keys []int64) {
	for i, key := range keys {
		if (i+1)*k.chunk > len(tokens) {
			break
		}
		if _, ok := k.chunks[key]; !ok {
			c := kvChunk{tokens: tokens[i*k.chunk : (i+1)*k.chunk]}
			if i > 0 {
				c.parent, c.hasParent = keys[i-1], true
			}
			k.chunks[key] = c
		}
	}
}

// apply publishes one engine step's CPU-tier changes as one batch of endpoint's.
func (k *kvSource) apply(endpoint string, evs []sim.KVEvent) {
	if len(evs) == 0 {
		return
	}
	out := make([]kvevents.Event, 0, len(evs))
	for _, ev := range evs {
		if !ev.Admit {
			out = append(out, kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: []uint64{uint64(ev.Key)}, Medium: "CPU"})
			continue
		}
		c, ok := k.chunks[ev.Key]
		if !ok {
			continue // a partial chunk
		}
		out = append(out, kvevents.Event{Kind: kvevents.BlockStored, Hashes: []uint64{uint64(ev.Key)}, Parent: uint64(c.parent),
			HasParent: c.hasParent, Tokens: c.tokens, BlockSize: k.chunk, Medium: "CPU"})
	}
	k.index.Apply(endpoint, kvevents.Batch{Events: out, DPRank: -1})
}

// cacheView returns the picker's cache view for source.
func (w *world) cacheView(source string) picker.CacheView {
	lm := picker.LMCacheView{Index: w.index}
	switch source {
	case picker.SourceVLLMEvents:
		return picker.KVEventsView{Index: w.kv.index}
	case picker.SourceBoth:
		return picker.Longest{lm, picker.KVEventsView{Index: w.kv.index}}
	}
	return lm
}
