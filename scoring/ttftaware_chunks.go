package scoring

// presumeChunk is the span, in tokens, of the chunks State records of each routed prompt
// (ttftaware's presumption by chunks): LMCache's chunk size and the prefix key's span, so
// a prompt's first chunk is its prefix key.
const presumeChunk = 256

// chunkHolders is how many endpoints State remembers a chunk on: the last it was routed to.
// A chunk on more engines than this is already spread enough that the eldest holding's
// credit changes no decision worth its memory.
const chunkHolders = 8

// maxChunks bounds the chunks State remembers (each about 200 bytes): 4 million prompt
// tokens in distinct chunks, ten times the largest GPU KV pool an A10 gives Qwen2.5-3B
// (about 390,000 tokens at gpu_memory_utilization 0.9).
const maxChunks = 1 << 14

// prunedSince is the uncached tokens booked on an endpoint after a chunk was routed there
// past which no pool holds it any more: 4 x KVPoolTokens, beyond the largest A10 pool. A
// full chunk store first forgets the chunks held nowhere by this measure.
const prunedSince = 4 * KVPoolTokens

// heldChunk is where one chunk of routed prompts went: up to chunkHolders endpoints, each
// with State.allocated there when it was routed (the mark presumedHeld measures from).
// next is the slot the next new endpoint takes (the eldest).
type heldChunk struct {
	holders [chunkHolders]chunkHolder
	next    uint8
}

// chunkHolder is one endpoint a chunk was routed to, after mark uncached tokens were
// booked there.
type chunkHolder struct {
	addr string
	mark float64
}

// chainChunk folds one chunk's tokens into the chained hash h of the chunks before it.
func chainChunk(h uint64, tokens []uint32) uint64 {
	for _, t := range tokens {
		h ^= uint64(t)
		h *= 1099511628211
	}
	return h | 1
}

// recordChunks records that prompt, whose prefix key is key, was routed to addr: each of
// its full presumeChunk-token chunks, the first named by the key and each later one by the
// chained hash of the tokens up to its end; s.mu must be held.
func (s *State) recordChunks(key uint64, addr string, prompt []uint32) {
	if key == 0 || len(prompt) < presumeChunk || s.indexed {
		return
	}
	if s.chunks == nil {
		s.chunks = map[uint64]heldChunk{}
	}
	mark := s.allocated[addr]
	h := key
	for end := presumeChunk; end <= len(prompt); end += presumeChunk {
		if end > presumeChunk {
			h = chainChunk(h, prompt[end-presumeChunk:end])
		}
		c, ok := s.chunks[h]
		if !ok && len(s.chunks) >= maxChunks {
			s.pruneChunks()
		}
		c.hold(addr, mark)
		s.chunks[h] = c
	}
}

// hold records the chunk routed to addr at mark: that endpoint's slot is refreshed (vLLM
// frees a reused block to the LRU queue's tail again), else the eldest slot is taken.
func (c *heldChunk) hold(addr string, mark float64) {
	for i := range c.holders {
		if c.holders[i].addr == addr {
			c.holders[i].mark = mark
			return
		}
	}
	c.holders[c.next] = chunkHolder{addr: addr, mark: mark}
	c.next = (c.next + 1) % chunkHolders
}

// pruneChunks forgets the chunks no endpoint can hold any more (prunedSince), and every
// chunk if that frees nothing; s.mu must be held.
func (s *State) pruneChunks() {
	for h, c := range s.chunks {
		live := false
		for _, o := range c.holders {
			if o.addr != "" {
				since := s.allocated[o.addr] - o.mark
				live = live || (since >= 0 && since < prunedSince)
			}
		}
		if !live {
			delete(s.chunks, h)
		}
	}
	if len(s.chunks) >= maxChunks {
		clear(s.chunks)
	}
}

// presumeChunks sets each candidate's Presumed in rs (in.Candidates' order) to the prompt
// tokens, from its start, in chunks routed there and still held (presumedHeld): the
// chunks this picker sent there, whoever's prompt they were part of. It does nothing and
// returns false unless the prompt's token ids are known (in.Tokens), it has a full
// chunk, and the cache index has never shown any candidate holding any prompt: once it
// has (State.indexed), the engines publish their KV events, and a prompt the index does
// not show was evicted from their CPU tier, where the picker's count of the tokens
// allocated since a routing (State.Uncached, which leaves out the tokens loaded from
// that tier into GPU blocks) no longer tells what the GPU still holds; the chunks are
// then forgotten and the last two routes presumed as before. s.mu must be held. It
// allocates nothing.
func (s *State) presumeChunks(in Input, rs []Ranked) bool {
	if s.indexed || in.PrefixKey == 0 || len(in.Tokens) != in.PromptTokens || in.PromptTokens < presumeChunk {
		return false
	}
	for _, c := range in.Candidates {
		if c.Matched > 0 {
			s.indexed = true
			clear(s.chunks)
			return false
		}
	}
	// alive: the candidates holding every chunk so far (at most chunkHolders of them).
	var alive [chunkHolders]int
	n := 0
	h := in.PrefixKey
	for end := presumeChunk; end <= len(in.Tokens); end += presumeChunk {
		if end > presumeChunk {
			h = chainChunk(h, in.Tokens[end-presumeChunk:end])
		}
		c, ok := s.chunks[h]
		if !ok {
			break
		}
		kept := 0
		if end == presumeChunk { // the first chunk: any candidate may hold it
			for i := range in.Candidates {
				if kept < chunkHolders && s.holdsChunk(&c, in.Candidates[i]) {
					alive[kept] = i
					kept++
				}
			}
		} else { // a later one: only those holding every chunk before it
			for _, i := range alive[:n] {
				if s.holdsChunk(&c, in.Candidates[i]) {
					alive[kept] = i
					kept++
				}
			}
		}
		n = kept
		if n == 0 {
			break
		}
		for _, i := range alive[:n] {
			rs[i].Presumed = end
		}
	}
	return true
}

// holdsChunk says whether c was routed to cand's endpoint and is still held there
// (presumedHeld); s.mu must be held.
func (s *State) holdsChunk(c *heldChunk, cand Candidate) bool {
	for _, o := range c.holders {
		if o.addr != "" && o.addr == cand.Addr {
			return presumedHeld(cand, s.allocated[o.addr]-o.mark)
		}
	}
	return false
}
