package scoring

import (
	"container/list"
	"hash/maphash"
)

// PrefixAware is the Production Stack router's prefix-aware routing (vllm_router
// routing_logic.py PrefixAwareRouter over prefix/hashtrie.py HashTrie, 0.1.x): the prompt
// text is cut into 128-character chunks; a trie of chunk hashes remembers, per node, the
// endpoints this router sent a prompt with that prefix to; the endpoints at the deepest
// node reached by the prompt win, one of them at random (every candidate when nothing
// matches), and the prompt is inserted for the winner. It reads no cache index and no
// load. Stand-ins: the trie is bounded (least recently used nodes go first, at
// prefixTrieNodes) where upstream grows without bound, and "random" is a seeded
// generator in State so runs reproduce.
type PrefixAware struct{ state *State }

// Name implements Policy.
func (*PrefixAware) Name() string { return "prefixaware" }

// Needs implements Policy.
func (*PrefixAware) Needs() Needs { return NeedsPrompt }

// ReasonPrefixMatch: prefixaware chose among the endpoints that served the longest
// matching text prefix; ReasonNoPrefix: nothing matched, chosen among all candidates.
const (
	ReasonPrefixMatch = "prefix-match"
	ReasonNoPrefix    = "no-prefix"
)

// prefixChunk is upstream's HashTrie chunk_size, in characters (bytes here).
const prefixChunk = 128

// prefixTrieNodes bounds the trie: 2^18 nodes of 128 characters cover 32 MiB of distinct
// prompt text, a few hundred thousand entries of bookkeeping.
const prefixTrieNodes = 1 << 18

// Rank implements Policy.
func (p *PrefixAware) Rank(in Input) []Ranked {
	rs := base(in, ReasonNoPrefix)
	if len(rs) == 0 {
		return rs
	}
	keys := chunkKeys(in.Prompt)
	p.state.mu.Lock()
	defer p.state.mu.Unlock()
	t := p.state.trie()
	held := t.longest(keys, rs)
	pool := make([]int, 0, len(rs))
	for i := range rs {
		if held == nil || held[rs[i].Addr] {
			pool = append(pool, i)
		}
	}
	if held != nil {
		label(rs, ReasonPrefixMatch)
	}
	win := pool[p.state.random(len(pool))]
	rs[0], rs[win] = rs[win], rs[0]
	for i := range rs {
		rs[i].Score = float64(len(rs) - i)
	}
	t.insert(keys, rs[0].Addr)
	return rs
}

// prefixSeed makes chunk hashes stable within a process (the trie never leaves it).
var prefixSeed = maphash.MakeSeed()

// chunkKeys returns the chained hash of every 128-character prefix chunk of text.
func chunkKeys(text string) []uint64 {
	var out []uint64
	var h uint64
	for off := 0; off < len(text); off += prefixChunk {
		var m maphash.Hash
		m.SetSeed(prefixSeed)
		var b [8]byte
		for i := range b {
			b[i] = byte(h >> (8 * i))
		}
		m.Write(b[:])
		m.WriteString(text[off:min(off+prefixChunk, len(text))])
		h = m.Sum64()
		out = append(out, h)
	}
	return out
}

// prefixTrie is the trie as a map of chained chunk hashes (a node's key encodes its whole
// path) to the endpoints that were sent that prefix, with an LRU bound on nodes.
type prefixTrie struct {
	nodes map[uint64]*list.Element // of *trieNode
	lru   *list.List               // most recent first
	limit int                      // most nodes kept
}

type trieNode struct {
	key uint64
	eps map[string]bool
}

func newPrefixTrie(limit int) *prefixTrie {
	return &prefixTrie{nodes: map[uint64]*list.Element{}, lru: list.New(), limit: limit}
}

// longest returns the endpoints (among the candidates) of the deepest node the keys
// reach whose endpoints include a candidate, or nil when no node matches.
func (t *prefixTrie) longest(keys []uint64, cands []Ranked) map[string]bool {
	var best map[string]bool
	for _, k := range keys {
		el, ok := t.nodes[k]
		if !ok {
			break
		}
		n := el.Value.(*trieNode)
		var live map[string]bool
		for _, c := range cands {
			if n.eps[c.Addr] {
				if live == nil {
					live = map[string]bool{}
				}
				live[c.Addr] = true
			}
		}
		if live == nil {
			break
		}
		t.lru.MoveToFront(el)
		best = live
	}
	return best
}

// insert records that addr was sent every prefix in keys, evicting the least recently
// used nodes over the limit.
func (t *prefixTrie) insert(keys []uint64, addr string) {
	for _, k := range keys {
		el, ok := t.nodes[k]
		if !ok {
			el = t.lru.PushFront(&trieNode{key: k, eps: map[string]bool{}})
			t.nodes[k] = el
		} else {
			t.lru.MoveToFront(el)
		}
		el.Value.(*trieNode).eps[addr] = true
	}
	for t.lru.Len() > t.limit {
		old := t.lru.Back()
		t.lru.Remove(old)
		delete(t.nodes, old.Value.(*trieNode).key)
	}
}
