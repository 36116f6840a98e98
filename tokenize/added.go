package tokenize

import "sort"

// addedMatcher finds added tokens in text, leftmost-longest, as the reference's Aho-Corasick
// (MatchKind::LeftmostLongest) does: the earliest start wins, and the longest token at it.
type addedMatcher struct {
	first [256]bool // bytes some token starts with
	nodes []trieNode
}

type trieNode struct {
	keys  []byte  // sorted edge labels
	kids  []int32 // child node per label
	id    uint32  // token id when terminal
	final bool
}

func newAddedMatcher(tokens map[string]uint32) *addedMatcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &addedMatcher{nodes: []trieNode{{}}}
	contents := make([]string, 0, len(tokens))
	for c := range tokens {
		contents = append(contents, c)
	}
	sort.Strings(contents)
	for _, c := range contents {
		if c == "" {
			continue
		}
		m.first[c[0]] = true
		n := 0
		for i := 0; i < len(c); i++ {
			n = m.child(n, c[i])
		}
		m.nodes[n].final = true
		m.nodes[n].id = tokens[c]
	}
	return m
}

func (m *addedMatcher) child(n int, b byte) int {
	nd := &m.nodes[n]
	i := sort.Search(len(nd.keys), func(i int) bool { return nd.keys[i] >= b })
	if i < len(nd.keys) && nd.keys[i] == b {
		return int(nd.kids[i])
	}
	m.nodes = append(m.nodes, trieNode{})
	k := int32(len(m.nodes) - 1)
	nd = &m.nodes[n]
	nd.keys = append(nd.keys, 0)
	nd.kids = append(nd.kids, 0)
	copy(nd.keys[i+1:], nd.keys[i:])
	copy(nd.kids[i+1:], nd.kids[i:])
	nd.keys[i], nd.kids[i] = b, k
	return int(k)
}

// next returns the leftmost-longest token in s[from:]: its start, end and id; ok is false when
// there is none.
func (m *addedMatcher) next(s string, from int) (start, end int, id uint32, ok bool) {
	if m == nil {
		return 0, 0, 0, false
	}
	for i := from; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		n, best := 0, -1
		for j := i; j < len(s); j++ {
			nd := &m.nodes[n]
			k := sort.Search(len(nd.keys), func(k int) bool { return nd.keys[k] >= s[j] })
			if k == len(nd.keys) || nd.keys[k] != s[j] {
				break
			}
			n = int(nd.kids[k])
			if m.nodes[n].final {
				best, id = j+1, m.nodes[n].id
			}
		}
		if best > 0 {
			return i, best, id, true
		}
	}
	return 0, 0, 0, false
}
