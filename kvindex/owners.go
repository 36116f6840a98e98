package kvindex

// A stream may hold one block in one tier several times over: the engine's own copy
// (an event without ownership) and copies kept by secondary offloading tiers (vLLM's
// ownership field, vllm#52067, names the tier that emitted the event). The tier's bit
// for the block stays set while any holder keeps its copy, so one holder's removal does
// not take away another's.
//
// A stream keeps holders only once it has seen an owned event (stream.owned): until
// then every copy is the engine's own and the bit alone says it all, so streams without
// secondary tiers pay nothing. A block whose bit was set before then has the engine as
// its one holder.

// ownBit is the engine's own copy in a holder set.
const ownBit = 1

// maxOwners is how many distinct owners an index tells apart (the engine's own
// included): a holder set is one 64-bit word.
const maxOwners = 64

// ownerBit returns owner's bit in a holder set, naming a new owner if needed; ok is false
// when maxOwners owners are already named. ix.mu is held.
func (ix *Index) ownerBit(owner string) (bit uint64, ok bool) {
	if owner == "" {
		return ownBit, true
	}
	if b, ok := ix.owners[owner]; ok {
		return b, true
	}
	if len(ix.owners)+1 >= maxOwners {
		return 0, false
	}
	if ix.owners == nil {
		ix.owners = map[string]uint64{}
	}
	b := uint64(1) << (len(ix.owners) + 1)
	ix.owners[owner] = b
	return b, true
}

// holdersKey is the key of (block key, tier) in a stream's holder table.
func holdersKey(key uint64, med Medium) uint64 { return fmix(key ^ (uint64(med)+1)*k2) }

// holders returns the holder set of key in med. ix.mu is held.
func (ix *Index) holders(med Medium, s *stream, key uint64) uint64 {
	m, _ := s.owners.get(holdersKey(key, med))
	if m == 0 {
		if v, _ := ix.held[med].get(wordKey(key, s.word())); v&s.bit() != 0 {
			m = ownBit // held since before the stream's first owned event
		}
	}
	return m
}

// hold records owner's copy of key in med. ix.mu is held.
func (ix *Index) hold(med Medium, s *stream, key, owner uint64) {
	if s.owned {
		s.owners.put(holdersKey(key, med), ix.holders(med, s, key)|owner)
	}
	ix.setBit(med, s, key)
}

// release forgets owner's copy of key in med, and the tier's bit once no holder is
// left. ix.mu is held.
func (ix *Index) release(med Medium, s *stream, key, owner uint64) {
	if s.owned {
		m := ix.holders(med, s, key) &^ owner
		if m != 0 {
			s.owners.put(holdersKey(key, med), m)
			return
		}
		s.owners.del(holdersKey(key, med))
	}
	ix.clearBit(med, s, key)
}
