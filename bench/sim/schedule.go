package sim

import (
	"slices"
	"time"
)

// schedule builds the next step the way vLLM V1's scheduler does and returns
// its duration. Running requests come first, in order: each gets its next
// tokens (one when decoding, up to the remaining budget when prefilling); a
// request that needs a block when none is free preempts the most recently
// admitted running request (its blocks are freed and it is recomputed later).
// Then, if nothing was preempted, waiting requests are admitted first come,
// first served while the token budget, the sequence cap and the free blocks
// allow: each reuses its longest cached prefix of full blocks, loads the
// contiguous chunks the CPU tier holds beyond that, and prefills the rest in
// chunks. The head of the queue blocks the rest when it does not fit. A
// request for an adapter that is not among the running requests' while
// MaxLoRAs adapters run is passed over (vLLM V1: "Scheduling would exceed
// max_loras, skip"), keeping its place; admitting an adapter that is not in a
// GPU slot activates it there first (AdapterLoad, the least recently used
// slot evicted).
func (e *Engine) schedule(now time.Duration) time.Duration {
	bs := e.cfg.BlockSize
	budget := e.cfg.MaxBatchedTokens
	var loaded, stored, admitted, activated int
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(r.numTokens()-r.computed, budget)
		for !e.grow(r, r.computed+n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == r {
				n = 0
				break
			}
		}
		if n == 0 {
			break
		}
		e.batch = append(e.batch, scheduled{r: r, start: r.computed, tokens: n})
		stored += e.storeCost(r, r.computed+n)
		budget -= n
	}
	var live []string // adapters of the running requests
	if e.cfg.MaxLoRAs > 0 {
		live = adapters(e.running)
	}
	skipped := 0 // waiting requests passed over for want of an adapter slot, kept at the head
	for !preempted && len(e.waiting) > skipped && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		r := e.waiting[skipped]
		if r.Adapter != "" && !slices.Contains(live, r.Adapter) && len(live) >= e.cfg.MaxLoRAs {
			skipped++
			continue
		}
		nt := r.numTokens()
		// GPU prefix cache: full blocks, leaving at least one token to compute.
		var hits []int32
		for i := 0; (i+1)*bs <= nt-1; i++ {
			id, ok := e.pool.lookup(r.blockHash(i, bs))
			if !ok {
				break
			}
			hits = append(hits, id)
		}
		hit := len(hits) * bs
		ext := 0
		cpu := e.cpuMatch(r)
		if cpu > hit {
			ext = min(cpu, nt-1) - hit
		}
		n := min(nt-hit-ext, budget)
		need := (hit+ext+n+bs-1)/bs - len(hits)
		freeHits := 0
		for _, id := range hits {
			if e.pool.blocks[id].inFree {
				freeHits++
			}
		}
		// vLLM counts the prefix-cache query and LMCache pins and touches
		// the chunks it finds at every attempt to admit the request, also
		// when the attempt then fails for lack of blocks.
		e.stats.PrefixQueries += int64(nt)
		e.stats.PrefixHits += int64(hit)
		e.touchCPU(r, cpu)
		if need > e.pool.free-freeHits {
			break
		}
		e.waiting = slices.Delete(e.waiting, skipped, skipped+1)
		if r.Adapter != "" && !slices.Contains(live, r.Adapter) {
			live = append(live, r.Adapter)
		}
		if r.Adapter != "" && e.activate(r.Adapter) {
			activated++
		}
		for _, id := range hits {
			e.pool.touch(id)
		}
		r.blocks = append(r.blocks[:0], hits...)
		for range need {
			r.blocks = append(r.blocks, e.pool.take())
		}
		r.registered = len(hits)
		r.computed = hit + ext
		loaded += ext
		if !r.admitted {
			r.admitted = true
			r.CachedTokens, r.LoadedTokens = hit, ext
			r.lmHit = cpu
			r.AdmittedAt = now
		}
		e.running = append(e.running, r)
		admitted++
		e.batch = append(e.batch, scheduled{r: r, start: r.computed, tokens: n})
		stored += e.storeCost(r, r.computed+n)
		budget -= n
	}
	return e.stepCost(loaded, stored, admitted) + time.Duration(float64(activated)*float64(e.cfg.AdapterLoad)*e.cfg.Slowdown)
}

// activate puts adapter in a GPU LoRA slot, most recently used, and reports
// whether it had to be loaded (it was in none). A full set of slots gives up
// its least recently used adapter that no running request needs; the
// scheduler never runs more adapters than there are slots, so there is one.
func (e *Engine) activate(adapter string) bool {
	if i := slices.Index(e.slots, adapter); i >= 0 {
		e.slots = append(slices.Delete(e.slots, i, i+1), adapter)
		return false
	}
	if len(e.slots) >= e.cfg.MaxLoRAs {
		inUse := adapters(e.running)
		for i, a := range e.slots {
			if _, busy := slices.BinarySearch(inUse, a); !busy || a == adapter {
				e.slots = slices.Delete(e.slots, i, i+1)
				break
			}
		}
	}
	e.slots = append(e.slots, adapter)
	e.stats.AdapterLoads++
	return true
}

// grow makes r hold blocks for its first tokens tokens; false when the pool is
// out of free blocks.
func (e *Engine) grow(r *Request, tokens int) bool {
	need := (tokens+e.cfg.BlockSize-1)/e.cfg.BlockSize - len(r.blocks)
	if need > e.pool.free {
		return false
	}
	for range need {
		r.blocks = append(r.blocks, e.pool.take())
	}
	return true
}

// preempt frees a running request's blocks (its full blocks stay cached) and
// puts it at the head of the waiting queue, to be recomputed.
func (e *Engine) preempt(r *Request) {
	e.pool.release(r.blocks)
	r.blocks = r.blocks[:0]
	r.registered = 0
	r.computed = 0
	r.Preemptions++
	e.stats.Preemptions++
	e.waiting = append([]*Request{r}, e.waiting...)
}

// cpuMatch returns how many leading prompt tokens the CPU tier holds as
// contiguous chunks. After a preemption the prompt's partial last chunk no
// longer matches: LMCache would hash it together with the generated tokens.
func (e *Engine) cpuMatch(r *Request) int {
	n := 0
	for i, k := range r.keys {
		if r.keyLens[i] < e.cfg.ChunkSize && r.generated > 0 {
			break
		}
		if !e.cpu.contains(k) {
			break
		}
		n += r.keyLens[i]
	}
	return n
}

// touchCPU marks the chunks covering the first tokens tokens as used: the
// engine's LMCache lookup pins the chunks it finds and touches them in LRU
// order whether or not they are then loaded.
func (e *Engine) touchCPU(r *Request, tokens int) {
	for i, n := 0, 0; i < len(r.keys) && n < tokens; i++ {
		e.cpu.touch(r.keys[i])
		n += r.keyLens[i]
	}
}

// storeCost returns the prompt tokens this step will copy to the CPU tier:
// when r's prefill completes, every chunk the tier lacks.
func (e *Engine) storeCost(r *Request, after int) int {
	if r.computed >= len(r.Tokens) || after < len(r.Tokens) || e.cpu.capacity == 0 || r.skipSave(e.cfg.ChunkSize) {
		return 0
	}
	n := 0
	for i, k := range r.keys {
		if !e.cpu.contains(k) {
			n += r.keyLens[i]
		}
	}
	return n
}

// storePrompt saves r's prompt chunks that the CPU tier lacks, recording an
// admit event for each and an evict event for each chunk pushed out.
func (e *Engine) storePrompt(r *Request) {
	if e.cpu.capacity == 0 || r.skipSave(e.cfg.ChunkSize) {
		return
	}
	var evicted []int64
	for i, k := range r.keys {
		var ok bool
		before := len(evicted)
		evicted, ok = e.cpu.store(k, int64(r.keyLens[i]), evicted)
		for _, ev := range evicted[before:] {
			e.out.KV = append(e.out.KV, KVEvent{Key: ev})
		}
		if ok {
			e.out.KV = append(e.out.KV, KVEvent{Key: k, Admit: true})
		}
	}
}

// stepCost is the duration of the scheduled batch, times Slowdown:
//
//	StepOverhead + SeqOverhead * sequences
//	+ max(weights / bandwidth, FLOPs / compute)                    (linear layers, roofline)
//	+ sum over sequences of max(attention FLOPs / compute, KV bytes read / bandwidth)
//	+ (loaded + stored tokens) * KV bytes per token / PCIe bandwidth
//
// FLOPs = tokens * 2 * (Params - EmbeddingParams) + sequences * 2 * EmbeddingParams.
func (e *Engine) stepCost(loaded, stored, admitted int) time.Duration {
	c := e.cfg
	compute := c.PeakFLOPS * c.PrefillEfficiency
	bw := c.MemBandwidth * c.MemEfficiency
	kvb := float64(c.KVBytesPerToken())
	attnFLOPsPerPair := 4 * float64(c.Layers*c.QueryHeads*c.HeadDim) // QK^T and AV, 2 FLOPs per multiply-add
	var flops, attn float64
	for _, s := range e.batch {
		// The transformer body acts on every computed token; vLLM computes
		// logits (the LM head) at one position per scheduled sequence.
		flops += float64(s.tokens)*2*(c.Params-c.EmbeddingParams) + 2*c.EmbeddingParams
		t, st := float64(s.tokens), float64(s.start)
		pairs := t * (st + (t+1)/2) // query-key pairs under the causal mask
		attn += max(attnFLOPsPerPair*pairs/compute, (st+t)*kvb/bw)
	}
	linear := max(c.Params*float64(c.BytesPerValue)/bw, flops/compute)
	pcie := float64(loaded+stored) * kvb / c.PCIeBandwidth
	host := (c.StepOverhead + time.Duration(len(e.batch))*c.SeqOverhead +
		time.Duration(admitted)*(c.AdmitOverhead+time.Duration(len(e.batch))*c.AdmitSeqCost)).Seconds()
	sec := linear + attn + pcie + host
	return time.Duration(sec*c.Slowdown*float64(time.Second)) + c.HostDelay
}
