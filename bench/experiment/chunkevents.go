package experiment

import (
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/kvindex"
)

// ChunkEvents turns an engine's LMCache CPU-tier changes into vLLM KV cache
// events, as LMCache's multi-process mode publishes them (medium CPU, one block
// per chunk, the chunk key as the engine's hash, the previous chunk as parent).
// A prompt's trailing partial chunk has no event: vLLM's events carry full
// blocks only. It learns chunks' tokens from the prompts an engine receives.
// It is not safe for concurrent use.
type ChunkEvents struct {
	chunk  int
	chunks map[int64]kvChunk // chunk key -> its tokens and parent
}

type kvChunk struct {
	tokens    []uint32
	parent    int64
	hasParent bool
}

// NewChunkEvents returns a converter for chunks of chunk tokens.
func NewChunkEvents(chunk int) *ChunkEvents {
	return &ChunkEvents{chunk: chunk, chunks: map[int64]kvChunk{}}
}

// Learn records the content of a prompt's full chunks (keys: its chunk keys).
func (c *ChunkEvents) Learn(tokens []uint32, keys []int64) {
	for i, key := range keys {
		if (i+1)*c.chunk > len(tokens) {
			break
		}
		if _, ok := c.chunks[key]; !ok {
			k := kvChunk{tokens: tokens[i*c.chunk : (i+1)*c.chunk]}
			if i > 0 {
				k.parent, k.hasParent = keys[i-1], true
			}
			c.chunks[key] = k
		}
	}
}

// Events returns one engine step's CPU-tier changes as events (nil for none):
// a BlockStored per stored full chunk, a BlockRemoved per evicted chunk.
func (c *ChunkEvents) Events(evs []sim.KVEvent) []kvindex.Event {
	var out []kvindex.Event
	for _, ev := range evs {
		if !ev.Admit {
			out = append(out, kvindex.Event{Kind: kvindex.BlockRemoved, Hashes: []uint64{uint64(ev.Key)}, Medium: "CPU"})
			continue
		}
		k, ok := c.chunks[ev.Key]
		if !ok {
			continue // a partial chunk
		}
		out = append(out, kvindex.Event{Kind: kvindex.BlockStored, Hashes: []uint64{uint64(ev.Key)}, Parent: uint64(k.parent),
			HasParent: k.hasParent, Tokens: k.tokens, BlockSize: c.chunk, Medium: "CPU"})
	}
	return out
}
