package tokenize

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// maxCachedPiece is the longest piece (in bytes) the cache keeps; longer ones are rare and would
// let one prompt evict many useful entries.
const maxCachedPiece = 256

const cacheShards = 16

// pieceCache is a bounded map from a pre-tokenized piece to its ids, safe for concurrent use. Each
// shard keeps two generations: lookups promote entries from the old generation to the current
// one, and when the current one is full the old one is dropped. Entries in use survive; the
// bound is 2*capacity/cacheShards entries per shard.
type pieceCache struct {
	seed   maphash.Seed
	perGen int
	shards [cacheShards]cacheShard
	hits   atomic.Uint64
	misses atomic.Uint64
}

type cacheShard struct {
	mu       sync.Mutex
	cur, old map[string][]uint32
}

func newPieceCache(capacity int) *pieceCache {
	c := &pieceCache{seed: maphash.MakeSeed(), perGen: max(1, capacity/cacheShards/2)}
	for i := range c.shards {
		c.shards[i].cur = make(map[string][]uint32)
	}
	return c
}

func (c *pieceCache) shard(p string) *cacheShard {
	return &c.shards[maphash.String(c.seed, p)%cacheShards]
}

func (c *pieceCache) get(p string) ([]uint32, bool) {
	s := c.shard(p)
	s.mu.Lock()
	ids, ok := s.cur[p]
	if !ok {
		if ids, ok = s.old[p]; ok {
			s.insert(strings.Clone(p), ids, c.perGen)
		}
	}
	s.mu.Unlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return ids, ok
}

// put stores a copy of ids for p.
func (c *pieceCache) put(p string, ids []uint32) {
	v := append([]uint32(nil), ids...)
	s := c.shard(p)
	s.mu.Lock()
	s.insert(strings.Clone(p), v, c.perGen)
	s.mu.Unlock()
}

func (s *cacheShard) insert(p string, ids []uint32, perGen int) {
	if len(s.cur) >= perGen {
		s.old, s.cur = s.cur, make(map[string][]uint32, perGen)
	}
	s.cur[p] = ids
}

func (c *pieceCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.cur) + len(s.old)
		s.mu.Unlock()
	}
	return n
}
