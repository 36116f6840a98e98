package scoring

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// candidateTop selects, while a policy scores candidates one by one in their order, the
// k best of them (byScore over the scores and the candidates' addresses), exactly as
// sortTop's heap selects them from a ranking written out in full: the same heap, offered
// the same entries in the same order, makes the same comparisons. A policy over a large
// fleet then writes a Ranked for the k it keeps only. k must be at most sortedPrefix;
// the zero value is not usable (newCandidateTop).
type candidateTop struct {
	cands  []Candidate
	sorted bool // cands are in strictly ascending address order (Input.Sorted)
	k, n   int
	floor  float64               // an entry scoring under it cannot beat the root
	h      [sortedPrefix]int32   // places in cands, h[:n] a heap whose root is the worst kept
	s      [sortedPrefix]float64 // s[j] is the score of h[j]
}

func newCandidateTop(in Input, k int) candidateTop {
	return candidateTop{cands: in.Candidates, sorted: in.Sorted, k: min(k, sortedPrefix)}
}

// cmp is byScore of the kept entries at heap places x and y.
func (t *candidateTop) cmp(x, y int) int {
	if math.Abs(t.s[x]-t.s[y]) > scoreEpsilon {
		return cmp.Compare(t.s[y], t.s[x])
	}
	return strings.Compare(t.cands[t.h[x]].Addr, t.cands[t.h[y]].Addr)
}

func (t *candidateTop) down(i int) {
	for {
		w, l, r := i, 2*i+1, 2*i+2
		if l < t.n && t.cmp(l, w) > 0 {
			w = l
		}
		if r < t.n && t.cmp(r, w) > 0 {
			w = r
		}
		if w == i {
			return
		}
		t.h[i], t.h[w] = t.h[w], t.h[i]
		t.s[i], t.s[w] = t.s[w], t.s[i]
		i = w
	}
}

// offer considers the candidate at place i, scoring score; places come in order.
func (t *candidateTop) offer(i int, score float64) {
	if t.n < t.k {
		t.h[t.n], t.s[t.n] = int32(i), score
		t.n++
		if t.n == t.k {
			for j := t.k/2 - 1; j >= 0; j-- {
				t.down(j)
			}
			t.floor = t.s[0] - scoreEpsilon
		}
		return
	}
	if score < t.floor {
		return
	}
	root := t.s[0]
	switch {
	case t.sorted:
		// Every kept entry comes before i, so in address order (see sortTop).
		if !(score-root > scoreEpsilon) {
			return
		}
	case math.Abs(score-root) > scoreEpsilon:
		if cmp.Compare(root, score) >= 0 {
			return
		}
	case strings.Compare(t.cands[i].Addr, t.cands[t.h[0]].Addr) >= 0:
		return
	}
	t.h[0], t.s[0] = int32(i), score
	t.down(0)
	t.floor = t.s[0] - scoreEpsilon
}

// places returns the kept candidates' places, ascending, in buf's memory.
func (t *candidateTop) places(buf *[sortedPrefix]int32) []int32 {
	p := buf[:t.n]
	copy(p, t.h[:t.n])
	slices.Sort(p)
	return p
}
