package kvindex

// The block budget (docs/decisions/1199): each stream (an endpoint's data-parallel rank)
// holds at most IndexConfig.MaxBlocks engine blocks. An engine that stores blocks and never
// removes them (a bug, or a hostile peer on the events port) then loses its own least
// recently stored blocks, never another stream's: streams are named by the subscriber's
// sockets and endpoints by the fleet, so no peer can add streams to widen its share.
//
// A stream keeps its engine hashes in the order they were first stored (stream.order,
// oldest at head). A hash removed by the engine stays there until it is popped or the
// order is compacted; a hash removed and stored again appears twice, and its older place
// counts (it may go a little early). Dropping a block clears its bits in every tier, so a
// lookup's prefix ends at it: a dropped block is never credited, and its descendants,
// still held, are found by no lookup until they are dropped in turn (they were stored
// after it, so they come next).

// DefaultMaxBlocks is the default IndexConfig.MaxBlocks: 2^20 blocks a stream, 57-69 MiB
// at the cost BenchmarkIndexBytesPerBlock measures. A real engine holds fewer
// (docs/decisions/1199): an 8B model's 128 KiB a token leaves one 80 GB GPU some 26,000
// blocks of 16 tokens, and 1 TiB of CPU tier adds 524,288.
const DefaultMaxBlocks = 1 << 20

// noteStored records that s's engine now holds h, stored for the first time since it was
// last dropped or removed, and reports whether s is still its id's stream (a compaction
// of the order lets the lock go between spans, and s may be dropped meanwhile). ix.mu is
// held, and is held again on return.
func (ix *Index) noteStored(s *stream, h uint64) bool {
	if ix.maxBlocks <= 0 {
		return true
	}
	s.order = append(s.order, h)
	if s.engine.Len() > ix.maxBlocks {
		ix.overBudget(s)
	}
	return ix.compactOrder(s)
}

// compactSpan is how many hashes of the order a compaction reads under one hold of the
// write lock (one engine-table probe each, about as long as a hold of lockSpan stores).
const compactSpan = 64

// overBudget drops s's least recently stored blocks until it holds at most ix.maxBlocks,
// and counts them. ix.mu is held.
func (ix *Index) overBudget(s *stream) {
	n := 0
	for s.engine.Len() > ix.maxBlocks && s.head < len(s.order) {
		h := s.order[s.head]
		s.head++
		if key, ok := s.engine.get(h); ok {
			ix.evict(s, h, key)
			n++
		}
	}
	if n > 0 {
		ix.m.dropped.WithLabelValues(DropBudget).Add(float64(n))
	}
}

// DropBudget labels loadaware_kvevents_dropped_blocks_total for blocks dropped over the
// budget.
const DropBudget = "budget"

// evict drops the block of engine hash h (key) from s in every tier. ix.mu is held.
func (ix *Index) evict(s *stream, h, key uint64) {
	for m := range numMedia {
		if s.owned {
			s.owners.del(holdersKey(key, m))
		}
		ix.clearBit(m, s, key)
	}
	ix.stamps.del(pair(key, s.salt))
	s.engine.del(h)
}

// compactOrder keeps s.order within twice the blocks s holds (or 1024) and its dead
// head within half the slice, at amortized O(1) a store or removal: past that it keeps
// only the newest place of each hash still held, letting the lock go every compactSpan
// hashes (a compaction of 10^6 blocks held it a second). It reports whether s is still
// its id's stream: only s's own writer changes s, and a drop forgets s. ix.mu is held,
// and is held again on return.
func (ix *Index) compactOrder(s *stream) bool {
	live := s.order[s.head:]
	switch {
	case len(live) > 2*max(s.engine.Len(), 1024):
		n := s.engine.Len()
		ix.mu.Unlock()
		seen := table{}
		seen.reserve(n)
		ix.mu.Lock()
		if ix.streams[s.id] != s {
			return false
		}
		w := len(live)
		for i := len(live) - 1; i >= 0; i-- { // newest first: the newest place is kept
			if i%compactSpan == 0 {
				ix.mu.Unlock()
				ix.mu.Lock()
				if ix.streams[s.id] != s {
					return false
				}
			}
			h := live[i]
			if _, held := s.engine.get(h); !held {
				continue
			}
			if _, dup := seen.get(h); dup {
				continue
			}
			seen.put(h, 1)
			w--
			live[w] = h
		}
		live = live[w:]
	case s.head > 1024 && s.head > len(live):
	default:
		return true
	}
	if cap(s.order) > 4*len(live)+1024 {
		s.order = append(make([]uint64, 0, len(live)+len(live)/4), live...)
	} else {
		s.order = append(s.order[:0], live...)
	}
	s.head = 0
	return true
}
