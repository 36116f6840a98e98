package kvindex

import (
	"maps"
	"slices"
)

// streamID names a stream: an endpoint and one of its data-parallel ranks.
type streamID struct {
	endpoint string
	rank     int
}

// stream is one publisher's view: an endpoint's data-parallel rank.
type stream struct {
	id        streamID
	slot      int
	salt      uint64
	blockSize int
	engine    table // engine block hash -> block key
	owned     bool  // an owned event was seen: owners is kept (owners.go)
	seq       int64 // the last batch applied (Batch.Seq)
	owners    table // holdersKey(block key, tier) -> holder set
	// order is the engine hashes in the order first stored, oldest at head, when the
	// index has a budget (budget.go).
	order []uint64
	head  int
}

func (s *stream) word() uint64 { return uint64(s.slot / 64) }
func (s *stream) bit() uint64  { return 1 << (s.slot % 64) }

// resize records a stream's new block size. ix.mu is held.
func (ix *Index) resize(s *stream, bs int) {
	s.blockSize = bs
	ix.publish(s.id.endpoint)
}

func (ix *Index) addStream(id streamID, bs int) *stream {
	ix.salt = fmix(ix.salt + 0x9e3779b97f4a7c15)
	slot := ix.slots
	if n := len(ix.free); n > 0 {
		slot, ix.free = ix.free[n-1], ix.free[:n-1]
	} else {
		ix.slots++
	}
	s := &stream{id: id, slot: slot, salt: ix.salt, blockSize: bs}
	ix.streams[id] = s
	ix.byEP[id.endpoint] = append(ix.byEP[id.endpoint], s)
	ix.publish(id.endpoint)
	return s
}

// directory is what lookups know of the streams: for each endpoint, its streams' slots,
// salts and block sizes. A directory is never changed; a writer that adds, forgets or
// resizes a stream publishes a new one (ix.mu held), before the slot it frees can be
// handed out again. A lookup may still read a slot through an older directory after
// the slot went to another stream; see Match for why that is never credited.
type directory struct {
	byEP map[string][]streamRef
}

// streamRef is a stream as a directory records it.
type streamRef struct {
	rank      int
	slot      int
	salt      uint64
	blockSize int
}

func (r streamRef) word() uint64 { return uint64(r.slot / 64) }
func (r streamRef) bit() uint64  { return 1 << (r.slot % 64) }

// publish replaces endpoint's streams in the directory by those of ix.byEP. ix.mu is
// held.
func (ix *Index) publish(endpoint string) {
	byEP := map[string][]streamRef{}
	if old := ix.dir.Load(); old != nil {
		byEP = maps.Clone(old.byEP)
	}
	if ss := ix.byEP[endpoint]; len(ss) > 0 {
		refs := make([]streamRef, len(ss))
		for i, s := range ss {
			refs[i] = streamRef{rank: s.id.rank, slot: s.slot, salt: s.salt, blockSize: s.blockSize}
		}
		byEP[endpoint] = refs
	} else {
		delete(byEP, endpoint)
	}
	ix.dir.Store(&directory{byEP: byEP})
}

// clear removes every entry of s and returns how many there were. ix.mu is held.
func (ix *Index) clear(s *stream) int {
	n := s.engine.Len()
	s.engine.each(func(_, key uint64) {
		for m := range numMedia {
			ix.clearBit(m, s, key)
		}
		ix.stamps.del(pair(key, s.salt))
	})
	s.engine.reset()
	s.owners.reset()
	s.owned = false
	s.order, s.head = nil, 0
	return n
}

// Drop forgets everything endpoint holds, on every rank (it left the fleet, or its
// stream can no longer be trusted). reason labels loadaware_kvevents_dropped_blocks_total.
func (ix *Index) Drop(endpoint, reason string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := 0
	for _, s := range ix.byEP[endpoint] {
		n += ix.clear(s)
		ix.forget(s)
	}
	delete(ix.byEP, endpoint)
	ix.publish(endpoint)
	ix.m.dropped.WithLabelValues(reason).Add(float64(n))
}

// DropRank forgets what one rank of endpoint holds (its stream can no longer be trusted,
// or it stopped). reason labels loadaware_kvevents_dropped_blocks_total.
func (ix *Index) DropRank(endpoint string, rank int, reason string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if s := ix.streams[streamID{endpoint, rank}]; s != nil {
		ix.dropLocked(s, reason)
	}
}

// dropLocked is DropRank of s. ix.mu is held.
func (ix *Index) dropLocked(s *stream, reason string) {
	endpoint := s.id.endpoint
	ix.m.dropped.WithLabelValues(reason).Add(float64(ix.clear(s)))
	ix.forget(s)
	rest := slices.DeleteFunc(ix.byEP[endpoint], func(o *stream) bool { return o == s })
	if len(rest) == 0 {
		delete(ix.byEP, endpoint)
	} else {
		ix.byEP[endpoint] = rest
	}
	ix.publish(endpoint)
}

// forget removes an emptied stream and frees its slot. ix.mu is held.
func (ix *Index) forget(s *stream) {
	delete(ix.streams, s.id)
	ix.free = append(ix.free, s.slot)
}
