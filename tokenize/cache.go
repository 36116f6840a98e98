package tokenize

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// maxCachedPiece is the longest piece (in bytes) the cache keeps; longer ones are rare and would
// let one prompt evict many useful entries.
const maxCachedPiece = 256

// pieceCache is a bounded map from a pre-tokenized piece to its ids, safe for concurrent use
// without locks: a power-of-two table of slots, each an atomic pointer to an immutable entry, in
// which a piece lives in one of two slots (its hash's slot and that slot's neighbour). A lookup
// is a hash, two loads and a string comparison; a store fills a free slot of the two, else
// replaces the one not used since the last store there (a second-chance bit). It holds at most
// as many entries as it has slots. The two-generation map behind sixteen mutexes it replaced
// cost a warm prompt more than its pre-tokenizing did (decision 1111).
type pieceCache struct {
	seed   maphash.Seed
	mask   uint64
	slots  []atomic.Pointer[cacheEntry]
	hits   atomic.Uint64
	misses atomic.Uint64
}

type cacheEntry struct {
	piece string
	ids   []uint32
	used  atomic.Bool // looked up since it was stored or last spared
}

// newPieceCache returns a cache of at most capacity entries (at least 2): the largest power of
// two not above it.
func newPieceCache(capacity int) *pieceCache {
	n := 2
	for n*2 <= capacity {
		n *= 2
	}
	return &pieceCache{seed: maphash.MakeSeed(), mask: uint64(n - 1), slots: make([]atomic.Pointer[cacheEntry], n)}
}

// get returns the ids of p, if cached. It does not count the lookup: Encode counts its own
// and adds them once (count).
func (c *pieceCache) get(p string) ([]uint32, bool) {
	i := maphash.String(c.seed, p) & c.mask
	for _, j := range [2]uint64{i, i ^ 1} {
		if e := c.slots[j].Load(); e != nil && e.piece == p {
			if !e.used.Load() {
				e.used.Store(true)
			}
			return e.ids, true
		}
	}
	return nil, false
}

// put stores a copy of p and ids.
func (c *pieceCache) put(p string, ids []uint32) {
	e := &cacheEntry{piece: strings.Clone(p), ids: append([]uint32(nil), ids...)}
	i := maphash.String(c.seed, p) & c.mask
	a, b := c.slots[i].Load(), c.slots[i^1].Load()
	switch {
	case a == nil || a.piece == p:
		c.slots[i].Store(e)
	case b == nil || b.piece == p:
		c.slots[i^1].Store(e)
	case !a.used.Load():
		b.used.Store(false)
		c.slots[i].Store(e)
	default:
		a.used.Store(false)
		c.slots[i^1].Store(e)
	}
}

// count adds one Encode's lookups to the totals.
func (c *pieceCache) count(hits, misses uint64) {
	if hits > 0 {
		c.hits.Add(hits)
	}
	if misses > 0 {
		c.misses.Add(misses)
	}
}

func (c *pieceCache) len() int {
	n := 0
	for i := range c.slots {
		if c.slots[i].Load() != nil {
			n++
		}
	}
	return n
}
