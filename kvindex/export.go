package kvindex

import (
	"errors"
	"fmt"
)

// StreamState is one stream's entries (an endpoint's data-parallel rank) as of the end of
// one batch, in the exporting index's key space: what a starting picker replica takes
// from a peer instead of replaying the engine's events (docs/decisions/0850).
type StreamState struct {
	// KeySpace is the exporting index's root: block keys mean the same only in indexes of
	// the same key space (see AdoptKeySpace).
	KeySpace uint64
	// Remote and ExtraKeys are the exporter's policies: they decided which blocks were
	// refused, so an index with others cannot take the state as its own.
	Remote    RemotePolicy
	ExtraKeys bool
	// Seq is the sequence number of the last batch applied (Batch.Seq): the state holds
	// every batch up to it and none after.
	Seq       int64
	BlockSize int
	// Owners names the holders of Block.Holders' bits from bit 1 (bit 0 is the engine's
	// own copy); nil when the stream has seen no owned event.
	Owners []string
	Blocks []BlockState
}

// BlockState is one engine block of a stream.
type BlockState struct {
	Hash  uint64 // the engine's block hash
	Key   uint64 // the index's key of the block's tokens and chain
	Tiers uint8  // bit m: held in Medium m
	Stamp uint64 // the store order of a chain's first block; 0 for the others
	// Holders is the holder set of each tier held (bits as Owners), when Owners is set.
	Holders [numMedia]uint64
}

// ErrNoStream is ExportStream's answer for a stream the index does not have.
var ErrNoStream = errors.New("kvindex: no such stream")

// ExportStream returns the entries of endpoint's rank at a batch boundary: it waits for
// the batches being applied to finish and holds new ones back while it reads (a 10^5-
// block stream takes milliseconds; lookups are not held back). ErrNoStream when the
// stream does not exist (never stored, dropped, or reset).
func (ix *Index) ExportStream(endpoint string, rank int) (StreamState, error) {
	ix.batchMu.Lock()
	defer ix.batchMu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s := ix.streams[streamID{endpoint, rank}]
	if s == nil {
		return StreamState{}, ErrNoStream
	}
	st := StreamState{KeySpace: ix.root.Load(), Remote: ix.remote, ExtraKeys: ix.extras, Seq: s.seq, BlockSize: s.blockSize,
		Blocks: make([]BlockState, 0, s.engine.Len())}
	var ownerOf [maxOwners]string // bit -> name
	if s.owned {
		for name, b := range ix.owners {
			ownerOf[bitIndex(b)] = name
		}
		// Bits are handed out in order, so names 1..n fill the slice without holes.
		st.Owners = append([]string(nil), ownerOf[1:len(ix.owners)+1]...)
	}
	var tiers []Medium // those holding anything: a probe per block and tier
	for m := range numMedia {
		if ix.held[m].NonEmpty() {
			tiers = append(tiers, m)
		}
	}
	s.engine.each(func(h, key uint64) {
		b := BlockState{Hash: h, Key: key}
		wk := wordKey(key, s.word())
		for _, m := range tiers {
			if v, _ := ix.held[m].get(wk); v&s.bit() != 0 {
				b.Tiers |= 1 << m
				if s.owned {
					b.Holders[m] = ix.holders(m, s, key)
				}
			}
		}
		b.Stamp, _ = ix.stamps.get(pair(key, s.salt))
		st.Blocks = append(st.Blocks, b)
	})
	return st, nil
}

// bitIndex is the position of the one set bit of b.
func bitIndex(b uint64) int {
	for i := range 64 {
		if b == 1<<i {
			return i
		}
	}
	return -1
}

// KeySpace is the index's key space (see AdoptKeySpace).
func (ix *Index) KeySpace() uint64 { return ix.root.Load() }

// AdoptKeySpace makes the index's key space root, as long as it has never had a stream
// (its keys would otherwise change meaning), and reports whether the key space is root
// now. Replicas that share one key space can take each other's streams (ImportStream).
func (ix *Index) AdoptKeySpace(root uint64) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.root.Load() == root {
		return true
	}
	if ix.slots > 0 || root == 0 {
		return false
	}
	ix.root.Store(root)
	return true
}

// importSpan is how many blocks ImportStream writes under one hold of the lock (as
// lockSpan for an event's blocks).
const importSpan = 256

// ImportStream replaces endpoint's rank by st (what ExportStream returned in another
// index) and records st.Seq as its last batch. It refuses a state of another key space
// (after AdoptKeySpace, if the index has had no stream), of other policies, or that does
// not hold together; the stream is then left empty. Lookups meanwhile see a growing part
// of the state, each block credited only once its chain's store order is in.
func (ix *Index) ImportStream(endpoint string, rank int, st StreamState) error {
	if !ix.AdoptKeySpace(st.KeySpace) {
		ix.DropRank(endpoint, rank, "snapshot")
		return fmt.Errorf("kvindex: a stream of another key space (%#x, this index's %#x): the replicas started apart; replay instead", st.KeySpace, ix.root.Load())
	}
	if err := ix.checkState(&st); err != nil {
		ix.DropRank(endpoint, rank, "snapshot")
		return err
	}
	ix.batchMu.RLock()
	defer ix.batchMu.RUnlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	id := streamID{endpoint, rank}
	if s := ix.streams[id]; s != nil {
		ix.dropLocked(s, "snapshot")
	}
	var bits [maxOwners]uint64 // the exporter's owner bit -> this index's
	bits[0] = ownBit
	for i, name := range st.Owners {
		b, ok := ix.ownerBit(name)
		if !ok {
			return fmt.Errorf("kvindex: the stream's owner %q is past the %d owners an index tells apart", name, maxOwners-1)
		}
		bits[i+1] = b
	}
	s := ix.addStream(id, st.BlockSize)
	s.owned = len(st.Owners) > 0
	s.seq = st.Seq
	s.engine.reserve(len(st.Blocks))
	// Store orders first (a lookup credits a chain only once its order is in), the
	// exporter's own: streams taken from one peer keep the order of their chains among
	// themselves (HolderRank, and the rank named on a tie), and chains stored here later
	// come after them.
	for i := range st.Blocks {
		if b := &st.Blocks[i]; b.Stamp != 0 {
			ix.stamps.put(pair(b.Key, s.salt), b.Stamp)
			ix.stamp = max(ix.stamp, b.Stamp)
		}
	}
	for i := range st.Blocks {
		if i > 0 && i%importSpan == 0 {
			ix.mu.Unlock()
			ix.mu.Lock()
			if ix.streams[id] != s {
				return errors.New("kvindex: the stream was dropped while it was imported")
			}
		}
		b := &st.Blocks[i]
		had := s.engine.Len()
		s.engine.put(b.Hash, b.Key)
		for m := range numMedia {
			if b.Tiers&(1<<m) == 0 {
				continue
			}
			if s.owned {
				var hs uint64
				for h := b.Holders[m]; h != 0; h &= h - 1 {
					hs |= bits[bitIndex(h&-h)]
				}
				s.owners.put(holdersKey(b.Key, m), hs)
			}
			ix.setBit(m, s, b.Key)
		}
		if s.engine.Len() > had && !ix.noteStored(s, b.Hash) {
			return errors.New("kvindex: the stream was dropped while it was imported")
		}
	}
	return nil
}

// checkState refuses a state this index cannot take as its own.
func (ix *Index) checkState(st *StreamState) error {
	switch {
	case st.Remote != ix.remote || st.ExtraKeys != ix.extras:
		return fmt.Errorf("kvindex: a stream indexed with --kv-events-remote %s and extra keys %v, this index with %s and %v: give every replica the same flags",
			st.Remote, st.ExtraKeys, ix.remote, ix.extras)
	case st.BlockSize <= 0:
		return fmt.Errorf("kvindex: a stream with block size %d", st.BlockSize)
	case len(st.Owners) >= maxOwners:
		return fmt.Errorf("kvindex: a stream with %d owners, more than the %d an index tells apart", len(st.Owners), maxOwners-1)
	}
	for i := range st.Blocks {
		b := &st.Blocks[i]
		if b.Tiers >= 1<<numMedia {
			return fmt.Errorf("kvindex: block %d of the stream has tiers %#x", i, b.Tiers)
		}
		if len(st.Owners) == 0 {
			continue
		}
		for m := range numMedia {
			held := b.Tiers&(1<<m) != 0
			if h := b.Holders[m]; held != (h != 0) || h >= 2<<len(st.Owners) {
				return fmt.Errorf("kvindex: block %d of the stream has holders %#x in tier %s", i, h, m)
			}
		}
	}
	return nil
}
