package kvindex

import (
	"slices"
	"sync"
)

// groupsFor returns the streams of endpoints in dir, grouped by block size, then by slot
// word (usually one group: a fleet has one block size and up to 64 streams). The caller
// must not change them. The grouping of the last list asked twice in a row (on one P)
// is kept in ix.last, and reused while the directory stays the same: a fleet's lookups
// usually ask about the same list, and comparing it costs less than finding each
// endpoint's streams.
func (ix *Index) groupsFor(dir *directory, endpoints []string, sc *matchScratch) []group {
	if r := ix.last.Load(); r != nil && r.dir == dir && slices.Equal(r.endpoints, endpoints) {
		return r.groups
	}
	groups := sc.groups[:0]
	for i, ep := range endpoints {
		for _, s := range dir.byEP[ep] {
			g := slices.IndexFunc(groups, func(g group) bool { return g.bs == s.blockSize && g.word == s.word() })
			if g < 0 {
				if len(groups) < cap(groups) {
					groups = groups[:len(groups)+1]
					groups[len(groups)-1].bs, groups[len(groups)-1].word = s.blockSize, s.word()
					groups[len(groups)-1].ws = groups[len(groups)-1].ws[:0]
				} else {
					groups = append(groups, group{bs: s.blockSize, word: s.word()})
				}
				g = len(groups) - 1
			}
			groups[g].ws = append(groups[g].ws, want{i, s})
		}
	}
	sc.groups = groups
	if slices.Equal(sc.missed, endpoints) {
		r := &resolution{dir: dir, endpoints: slices.Clone(endpoints), groups: make([]group, len(groups))}
		for i, g := range groups {
			r.groups[i] = group{bs: g.bs, word: g.word, ws: slices.Clone(g.ws)}
		}
		ix.last.Store(r)
	}
	sc.missed = append(sc.missed[:0], endpoints...)
	return groups
}

// resolution is the grouping of one endpoint list's streams in one directory. It is
// never changed once published.
type resolution struct {
	dir       *directory
	endpoints []string
	groups    []group
}

// The streams a lookup asks about, grouped by block size and slot word.
type want struct {
	ep int // index in endpoints
	s  streamRef
}

type group struct {
	bs   int
	word uint64
	ws   []want
}

// matchScratch is a lookup's working memory, reused through scratchPool so that a
// lookup allocates only its result.
type matchScratch struct {
	groups []group
	stamps []uint64
	ranked []int
	keys   []promptKeys // the prompt's block keys, per block size
	missed []string     // the last endpoint list not found in ix.last
}

type promptKeys struct {
	bs   int
	keys []uint64
}

var scratchPool = sync.Pool{New: func() any { return new(matchScratch) }}

// keysFor returns the prompt's block keys for block size bs, computed once per lookup
// (sc.keys is emptied at the start of a lookup: see Match).
func (sc *matchScratch) keysFor(ix *Index, tokens []uint32, root uint64, bs int) []uint64 {
	for _, pk := range sc.keys {
		if pk.bs == bs {
			return pk.keys
		}
	}
	var buf []uint64
	if n := len(sc.keys); n < cap(sc.keys) {
		buf = sc.keys[:n+1][n].keys
	}
	ks := ix.appendPromptKeys(buf[:0], tokens, root, bs)
	sc.keys = append(sc.keys, promptKeys{bs, ks})
	return ks
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// promptKeys returns the keys of the prompt's full blocks of bs tokens.
func (ix *Index) promptKeys(tokens []uint32, bs int) []uint64 {
	return ix.appendPromptKeys(nil, tokens, ix.root.Load(), bs)
}

// appendPromptKeys appends the keys of the prompt's full blocks of bs tokens, chained
// from root (see rootKey), to ks.
func (ix *Index) appendPromptKeys(ks []uint64, tokens []uint32, root uint64, bs int) []uint64 {
	n := len(tokens) / bs
	ks = slices.Grow(ks, n)
	seed := ix.root.Load()
	if bs == 16 {
		return appendChain16(ks, root, seed, tokens[:n*16])
	}
	parent := root
	for j := range n {
		parent = chain(parent, seed, tokens[j*bs:(j+1)*bs])
		ks = append(ks, parent)
	}
	return ks
}
