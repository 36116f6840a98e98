// Package sim is a discrete-event model of one vLLM V1 engine serving
// Qwen2.5-3B-Instruct on an NVIDIA A10 with LMCache CPU offload: continuous
// batching with chunked prefill, a paged KV-block pool with shared prefix
// blocks, LRU eviction and recompute preemption, and an LMCache CPU tier that
// reports every stored and evicted 256-token chunk by its real chunk key.
//
// The model has no clock of its own: the caller advances time. Start begins an
// engine step at a given time and returns when it ends; Finish applies the
// step at that time and reports the tokens produced, the requests finished and
// the cache events. Equal calls give equal results (virtual time is exactly
// repeatable), and the same model can be driven by a wall clock in a live
// adapter. sim does no I/O, reads no clocks and starts no goroutines.
//
// Every constant is named in Config; docs/bench/simulator.md derives each from
// the hardware and software facts, and says which few were calibrated.
package sim

import (
	"fmt"
	"math"
	"time"
)

// Config is the engine model's constants.
type Config struct {
	// Model: Qwen2.5-3B-Instruct.
	Params          float64 // parameters (3.09e9), all read once per step
	EmbeddingParams float64 // vocabulary x hidden (151,936 x 2,048 = 0.31e9): the tied embedding / LM head
	Layers          int     // transformer layers (36)
	QueryHeads      int     // attention query heads (16)
	KVHeads         int     // key/value heads (2, grouped-query attention)
	HeadDim         int     // dimension per head (128)
	BytesPerValue   int     // bytes per weight / KV element (2, bf16)

	// GPU: NVIDIA A10.
	PeakFLOPS         float64 // dense bf16 tensor peak, FLOP/s (125e12)
	MemBandwidth      float64 // DRAM bandwidth, bytes/s (600e9)
	PrefillEfficiency float64 // achieved fraction of PeakFLOPS in prefill GEMMs and attention
	MemEfficiency     float64 // achieved fraction of MemBandwidth for streaming reads

	// vLLM V1 engine.
	KVPoolTokens     int // tokens of KV the pool holds (gpu_memory_utilization 0.45: ~99,000)
	BlockSize        int // tokens per KV block (16)
	MaxBatchedTokens int // token budget per step (max_num_batched_tokens, 2048)
	MaxNumSeqs       int // running-sequence cap (max_num_seqs, 256)

	// LoRA (vLLM --enable-lora): MaxLoRAs adapters run at once (max_loras; 0: no
	// adapters served), and activating an adapter into a GPU slot costs
	// AdapterLoad (docs/decisions/0820: a rank-16 adapter of every linear layer
	// of Qwen2.5-3B is 60 MB, 5 ms over the PCIe rate below).
	MaxLoRAs    int
	AdapterLoad time.Duration

	// LMCache CPU offload.
	CPUTierBytes  int64   // LocalCPUBackend size (4 GiB)
	ChunkSize     int     // LMCache chunk_size (256)
	PCIeBandwidth float64 // effective host<->device copy rate, bytes/s

	// Calibrated on the kvaware and roundrobin rows (docs/bench/simulator.md).
	Slowdown       float64       // multiplies every step's duration: 1 = nominal; >1 models a slower GPU host
	StepOverhead   time.Duration // fixed cost of one engine step (scheduler, launch, sampling, output)
	SeqOverhead    time.Duration // cost per scheduled sequence per step (per-request bookkeeping and streaming)
	AdmitOverhead  time.Duration // cost per request the step admits (LMCache lookup and load/save set-up, input preparation)
	AdmitSeqCost   time.Duration // cost per request the step admits and per sequence in the step (the batch re-prepared around it)
	IngressLatency time.Duration // client send -> request in the engine's queue (HTTP, router hop, tokenizing)
	HostDelay      time.Duration // extra host time added to every step of this engine (CPU contention on its node); not scaled by Slowdown
	OutputCost     time.Duration // API server time per output token (detokenize, stream), pipelined with the next steps
}

// DefaultConfig returns the calibrated model of the published testbed.
func DefaultConfig() Config {
	return Config{
		Params:          3.09e9,
		EmbeddingParams: 151936 * 2048,
		Layers:          36,
		QueryHeads:      16,
		KVHeads:         2,
		HeadDim:         128,
		BytesPerValue:   2,

		PeakFLOPS:         125e12,
		MemBandwidth:      600e9,
		PrefillEfficiency: 0.25,
		MemEfficiency:     0.8,

		KVPoolTokens:     99000,
		BlockSize:        16,
		MaxBatchedTokens: 2048,
		MaxNumSeqs:       256,

		CPUTierBytes:  4 << 30,
		ChunkSize:     256,
		PCIeBandwidth: 12e9,

		Slowdown:       1,
		StepOverhead:   6 * time.Millisecond,
		SeqOverhead:    500 * time.Microsecond,
		AdmitOverhead:  25 * time.Millisecond,
		AdmitSeqCost:   150 * time.Microsecond,
		IngressLatency: 0,
		OutputCost:     310 * time.Microsecond,
	}
}

// KVBytesPerToken is the KV cache size of one token: K and V for every layer
// and KV head (36,864 bytes for Qwen2.5-3B in bf16).
func (c Config) KVBytesPerToken() int {
	return 2 * c.Layers * c.KVHeads * c.HeadDim * c.BytesPerValue
}

// CPUTierTokens is how many tokens of KV the LMCache CPU tier holds.
func (c Config) CPUTierTokens() int64 { return c.CPUTierBytes / int64(c.KVBytesPerToken()) }

// Blocks is the number of KV blocks in the GPU pool.
func (c Config) Blocks() int { return c.KVPoolTokens / c.BlockSize }

// Validate reports the first unusable constant.
func (c Config) Validate() error {
	pos := []struct {
		name string
		v    float64
	}{
		{"Params", c.Params}, {"Layers", float64(c.Layers)}, {"QueryHeads", float64(c.QueryHeads)},
		{"KVHeads", float64(c.KVHeads)}, {"HeadDim", float64(c.HeadDim)}, {"BytesPerValue", float64(c.BytesPerValue)},
		{"PeakFLOPS", c.PeakFLOPS}, {"MemBandwidth", c.MemBandwidth},
		{"PrefillEfficiency", c.PrefillEfficiency}, {"MemEfficiency", c.MemEfficiency},
		{"BlockSize", float64(c.BlockSize)}, {"MaxBatchedTokens", float64(c.MaxBatchedTokens)},
		{"MaxNumSeqs", float64(c.MaxNumSeqs)}, {"ChunkSize", float64(c.ChunkSize)},
		{"PCIeBandwidth", c.PCIeBandwidth}, {"Slowdown", c.Slowdown},
	}
	for _, p := range pos {
		if !(p.v > 0) || math.IsInf(p.v, 0) {
			return fmt.Errorf("sim: %s = %v: must be positive and finite", p.name, p.v)
		}
	}
	if !(c.EmbeddingParams >= 0) || c.EmbeddingParams >= c.Params {
		return fmt.Errorf("sim: EmbeddingParams = %v: must be at least 0 and below Params (%v)", c.EmbeddingParams, c.Params)
	}
	if c.PrefillEfficiency > 1 || c.MemEfficiency > 1 {
		return fmt.Errorf("sim: efficiencies are fractions of peak: got prefill %v, memory %v", c.PrefillEfficiency, c.MemEfficiency)
	}
	if c.KVPoolTokens < c.BlockSize {
		return fmt.Errorf("sim: KVPoolTokens %d is smaller than one block of %d", c.KVPoolTokens, c.BlockSize)
	}
	if c.CPUTierBytes < 0 {
		return fmt.Errorf("sim: CPUTierBytes %d is negative: use 0 to disable the CPU tier", c.CPUTierBytes)
	}
	if c.MaxLoRAs < 0 || c.AdapterLoad < 0 {
		return fmt.Errorf("sim: MaxLoRAs %d and AdapterLoad %v must not be negative", c.MaxLoRAs, c.AdapterLoad)
	}
	if c.StepOverhead < 0 || c.SeqOverhead < 0 || c.AdmitOverhead < 0 || c.AdmitSeqCost < 0 || c.IngressLatency < 0 || c.HostDelay < 0 || c.OutputCost < 0 {
		return fmt.Errorf("sim: overheads and latencies must not be negative")
	}
	return nil
}
