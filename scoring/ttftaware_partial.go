package scoring

// partialBlocks is a prompt's KV blocks (tailTokens each, vLLM's block_size) in one chunk
// of presumeChunk tokens from at: hash[j] is the hash of its tokens from at to the end of
// block j (0 past the prompt's end).
type partialBlocks struct {
	at   int
	next int // where the key's index match ended at its last decision: the next prompt's at
	hash [presumeChunk / tailTokens]uint64
}

// fill sets b to prompt's blocks from at.
func (b *partialBlocks) fill(prompt []uint32, at int) {
	b.at = at
	h := uint64(14695981039346656037)
	for j := range b.hash {
		b.hash[j] = 0
		end := at + (j+1)*tailTokens
		if at < 0 || end > len(prompt) {
			continue
		}
		for _, t := range prompt[end-tailTokens : end] {
			h ^= uint64(t)
			h *= 1099511628211
		}
		b.hash[j] = h | 1
	}
}

// shared is how many of prompt's leading blocks from b.at agree with b's.
func (b *partialBlocks) shared(prompt []uint32) int {
	h := uint64(14695981039346656037)
	for j := range b.hash {
		end := b.at + (j+1)*tailTokens
		if b.at < 0 || end > len(prompt) || b.hash[j] == 0 {
			return j
		}
		for _, t := range prompt[end-tailTokens : end] {
			h ^= uint64(t)
			h *= 1099511628211
		}
		if h|1 != b.hash[j] {
			return j
		}
	}
	return len(b.hash)
}

// recordPartial keeps the routed prompt's blocks in the chunk where the key's index match
// last ended; s.mu must be held.
func (s *State) recordPartial(key uint64, prompt []uint32) {
	r, ok := s.recent[key]
	if !ok {
		return
	}
	r.partial.fill(prompt, r.partial.next)
	s.recent[key] = r
}

// partialHeld: the index matches whole chunks; the engine holds blocks. When the most any
// candidate's index match shows of the prompt is at tokens, a whole number of chunks short
// of it, the prompt's blocks past at that the key's last routed prompt shared run to `to`
// (0: none known). s.mu must be held.
func (s *State) partialHeld(in Input, last routed, ok bool) (at, to int) {
	if !ok || len(in.Tokens) != in.PromptTokens {
		return 0, 0
	}
	for _, c := range in.Candidates {
		at = max(at, c.Matched)
	}
	if at <= 0 || at >= in.PromptTokens || at%presumeChunk != 0 {
		return 0, 0
	}
	if last.partial.next != at {
		last.partial.next = at
		s.recent[in.PrefixKey] = last
	}
	if last.partial.at != at {
		return at, 0
	}
	k := last.partial.shared(in.Tokens)
	if k == 0 {
		return at, 0
	}
	return at, min(at+k*tailTokens, in.PromptTokens)
}

// heldPartial says whether c, whose index match shows the key's chunks (so it served a
// prompt of the key, computed or loaded, and held all its blocks then), holds them still: its
// free KV has not been allocated again (presumedHeld) by the prompt tokens routed there since
// the key was, cached or not (the index's match may be the CPU tier's, which the engine loads
// into new blocks, so the uncached tokens alone, State.allocated, undercount its
// allocations). That is known where the key was last routed, and last before that to
// another endpoint; another holder was routed the key before both, and is presumed to hold
// it while the older of the two does (older: partialOlderHeld). s.mu must be held.
func (s *State) heldPartial(c Candidate, last routed, older bool) bool {
	for _, rt := range [2]route{last.route, last.prev} {
		if rt.addr == c.Addr {
			return presumedHeld(c, s.routedTokens[rt.addr]-rt.routedMark)
		}
	}
	return older
}

// partialOlderHeld is heldPartial for the older of the key's two last routes (the last
// before the last to another endpoint, or the last when there is none) among cands.
func (s *State) partialOlderHeld(cands []Candidate, last routed) bool {
	older := last.prev
	if older.addr == "" {
		older = last.route
	}
	for _, c := range cands {
		if c.Addr == older.addr {
			return presumedHeld(c, s.routedTokens[older.addr]-older.routedMark)
		}
	}
	return false
}
