package kvindex

// Kind is an event's tag.
type Kind uint8

// The event kinds vLLM publishes.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Event is one decoded KV cache event. Hashes are engine block hashes folded to 64 bits:
// an int hash as its two's-complement bits, a bytes hash as its last 8 bytes read
// big-endian (what vLLM sends as the int form of the same digest).
type Event struct {
	Kind      Kind
	Hashes    []uint64
	Parent    uint64
	HasParent bool
	Tokens    []uint32
	BlockSize int
	LoRAID    int64 // 0 when absent or None
	Medium    string
	LoRAName  string
	// Salt is the cache_salt found in the first block's extra keys (vLLM puts it on
	// block 0 only); empty when none.
	Salt string
	// ExtraKeys is true when a block carries extra hash keys other than the LoRA name and
	// the first block's cache_salt (multimodal items, prompt embeds): such blocks cannot
	// be keyed from a request's tokens, adapter and salt.
	ExtraKeys     bool
	Group         int    // HMA KV cache group; 0 when absent
	SpecKind      string // kv_cache_spec_kind; empty when absent
	SlidingWindow int
	// Locality is "LOCAL" or "REMOTE" relative to the publisher (vllm#48281, v0.26);
	// empty when unspecified.
	Locality string
	// Ownership names the secondary offloading tier that emitted the event (vllm#52067);
	// empty for the engine's own blocks.
	Ownership string
}

// Batch is one decoded KVEventBatch.
type Batch struct {
	TS     float64
	Events []Event
	DPRank int // -1 when None or absent
	// Seq is the batch's sequence number in its stream (the subscriber's), recorded as the
	// stream's last batch for ExportStream.
	Seq int64
	// Skipped counts events of an unknown tag, left out of Events.
	Skipped int
}
