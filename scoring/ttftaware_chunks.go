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

// prunedSince is the distinct prompt tokens routed to an endpoint after a chunk was routed
// there (chunkLRU.since) past which no pool holds it any more: 4 x KVPoolTokens, beyond the
// largest A10 pool. A full chunk store first forgets the chunks held nowhere by this measure.
const prunedSince = 4 * KVPoolTokens

// heldChunk is where one chunk of routed prompts went: up to chunkHolders endpoints, each
// with the chunk's last position in that endpoint's chunkLRU (the mark holdsChunk
// measures the distinct tokens routed there since from).
// next is the slot the next new endpoint takes (the eldest).
type heldChunk struct {
	holders [chunkHolders]chunkHolder
	next    uint8
}

// chunkHolder is one endpoint a chunk was routed to, last at position mark of its
// chunkLRU.
type chunkHolder struct {
	addr string
	mark uint64
}

// chainChunk folds one chunk's tokens into the chained hash h of the chunks before it.
func chainChunk(h uint64, tokens []uint32) uint64 {
	for _, t := range tokens {
		h ^= uint64(t)
		h *= 1099511628211
	}
	return h | 1
}

// chunkChain is the chained hashes of one prompt's leading full chunks, computed once for a
// decision: presumeChunks reads them to rank, and recordChunks, once the prompt is booked,
// reads them again (both walks cost a multiply per token, in one serial chain). The prompt
// is named by its prefix key and its token slice (the first element's address and the
// length): the caller ranks and then records one prompt without changing its token ids
// between. recordChunks forgets the chain after reading it, and presumeChunks starts a new
// one at each decision, so a chain is never read for a later prompt.
type chunkChain struct {
	key    uint64
	first  *uint32
	n      int
	hashes []uint64 // hashes[k]: the chunk ending at token (k+1) x presumeChunk; hashes[0] is key
}

// hash returns the chained hash of prompt's k-th full chunk (k from 0; the first is key),
// computing those not known yet; s.mu must be held by the chain's owner.
func (c *chunkChain) hash(key uint64, prompt []uint32, k int) uint64 {
	if c.key != key || c.first != &prompt[0] || c.n != len(prompt) || len(c.hashes) == 0 {
		c.key, c.first, c.n, c.hashes = key, &prompt[0], len(prompt), append(c.hashes[:0], key)
	}
	for j := len(c.hashes); j <= k; j++ {
		c.hashes = append(c.hashes, chainChunk(c.hashes[j-1], prompt[j*presumeChunk:(j+1)*presumeChunk]))
	}
	return c.hashes[k]
}

// forget drops the chain (and its hold on the prompt's memory).
func (c *chunkChain) forget() { c.key, c.first, c.n, c.hashes = 0, nil, 0, c.hashes[:0] }

// recordChunks records that prompt, whose prefix key is key, was routed to addr: each of
// its full presumeChunk-token chunks, the first named by the key and each later one by the
// chained hash of the tokens up to its end, and the tokens past the last full chunk, at
// new positions in addr's chunkLRU (those tokens first, then the chunks from the last to
// the first, the order vLLM frees them in); s.mu must be held.
func (s *State) recordChunks(key uint64, addr string, prompt []uint32) {
	if key == 0 || len(prompt) == 0 || s.indexed {
		return
	}
	if s.chunks == nil {
		s.chunks, s.lru = map[uint64]heldChunk{}, map[string]*chunkLRU{}
	}
	l := s.lru[addr]
	if l == nil {
		l = newChunkLRU(s.lruTop)
		s.lru[addr] = l
	}
	full := len(prompt) / presumeChunk
	first := l.reserve(full + 1) // the rest's position, then the chunks' from the last
	l.put(first, len(prompt)-full*presumeChunk)
	for k := range full {
		h := s.chain.hash(key, prompt, k)
		c, ok := s.chunks[h]
		if !ok && len(s.chunks) >= maxChunks {
			s.pruneChunks()
		}
		c.hold(addr, l, first+uint64(full-k))
		s.chunks[h] = c
	}
	s.lruTop = max(s.lruTop, l.seq)
	s.chain.forget()
}

// hold records the chunk routed to addr, at position pos of its LRU l: that endpoint's
// slot leaves its old position (vLLM frees a reused block to the LRU queue's tail again),
// else the eldest slot is taken.
func (c *heldChunk) hold(addr string, l *chunkLRU, pos uint64) {
	l.put(pos, presumeChunk)
	for i := range c.holders {
		if c.holders[i].addr == addr {
			l.leave(c.holders[i].mark)
			c.holders[i].mark = pos
			return
		}
	}
	c.holders[c.next] = chunkHolder{addr: addr, mark: pos}
	c.next = (c.next + 1) % chunkHolders
}

// pruneChunks forgets the chunks no endpoint can hold any more (prunedSince), and every
// chunk if that frees nothing; s.mu must be held.
func (s *State) pruneChunks() {
	for h, c := range s.chunks {
		live := false
		for _, o := range c.holders {
			if l := s.lru[o.addr]; o.addr != "" && l != nil {
				since := l.since(o.mark)
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
// tokens, from its start, in chunks routed there and still held (holdsChunk): the
// chunks this picker sent there, whoever's prompt they were part of. It does nothing and
// returns false unless the prompt's token ids are known (in.Tokens), it has a full
// chunk, and the cache index has never shown any candidate holding any prompt: once it
// has (State.indexed), the engines publish their KV events, and a prompt the index does
// not show was evicted from their CPU tier, where the picker's count of the tokens
// allocated since a routing (State.Uncached, which leaves out the tokens loaded from
// that tier into GPU blocks) no longer told what the GPU still holds (decision 1670;
// the LRU of the tokens routed, chunkLRU, was not tried there); the chunks are then
// forgotten and the last two routes presumed as before. s.mu must be held. It
// allocates nothing.
func (s *State) presumeChunks(in Input, rs []Ranked) bool {
	s.chain.forget()
	if s.indexed || in.PrefixKey == 0 || len(in.Tokens) != in.PromptTokens || in.PromptTokens < presumeChunk {
		return false
	}
	for _, c := range in.Candidates {
		if c.Matched > 0 {
			s.indexed = true
			clear(s.chunks)
			clear(s.lru)
			return false
		}
	}
	// alive: the candidates holding every chunk so far (at most chunkHolders of them).
	var alive [chunkHolders]int
	n := 0
	for end := presumeChunk; end <= len(in.Tokens); end += presumeChunk {
		c, ok := s.chunks[s.chain.hash(in.PrefixKey, in.Tokens, end/presumeChunk-1)]
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

// holdsChunk says whether c was routed to cand's endpoint and is still held there: fewer
// distinct prompt tokens were routed there since (chunkLRU.since) than its GPU KV pool
// holds (kvPool). vLLM's prefix cache is an LRU of blocks whose most recently used are the
// running sequences' (out of the free queue) and then the blocks freed last, so a chunk is
// evicted once a pool's worth of other blocks were used after it: the pool, not its free
// part, since the running sequences' prompts are among the tokens counted. Their decode
// tokens are not (the picker does not know them), so a decode-heavy engine evicts a little
// sooner than this says; counting an estimate of them (the measured decode duration over
// a step's) erred less but lost held-out TTFT (decision 1690). s.mu must be held.
func (s *State) holdsChunk(c *heldChunk, cand Candidate) bool {
	for _, o := range c.holders {
		if o.addr != "" && o.addr == cand.Addr {
			l := s.lru[o.addr]
			if l == nil {
				return false
			}
			since := l.since(o.mark)
			return since >= 0 && since < kvPool(cand.Engine)
		}
	}
	return false
}

// routeChunksHeld says whether a last route that this prompt starts with (pastRoute.starts)
// still counts whole while the chunks are read: only while its full chunks are presumed
// held there (byChunks, the candidate's presumption by chunks, reaches them). vLLM frees a
// finished request's blocks last first, so its partial last chunk is evicted before them;
// the route's own measure (its uncached tokens booked since) would keep a prompt the
// engine's LRU already evicted.
func routeChunksHeld(byChunks, tokens int) bool {
	return byChunks >= tokens/presumeChunk*presumeChunk
}
