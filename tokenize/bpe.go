package tokenize

import (
	"math"
	"slices"
	"sync"
)

// bpeModel is a byte-level BPE model: every symbol is a token id, merges are keyed by the ids of
// the adjacent pair and carry their rank and the id of the merged token.
type bpeModel struct {
	byteTok      [256]uint32       // id of each single-byte token
	merges       mergeTable        // (left<<32 | right) -> (rank<<32 | merged id)
	vocab        map[string]uint32 // raw bytes -> id (for ignore_merges)
	ignoreMerges bool              // a piece that is itself in the vocabulary is emitted whole
}

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// smallPiece is the symbol count up to which the quadratic merge loop beats the heap.
const smallPiece = 128

// shortPiece is the length up to which encode gives encodeSmall arrays of that size: zeroing
// the 1.5 KiB of the smallPiece arrays was 18% of encoding a word (decision 1111).
const shortPiece = 16

// encode appends the ids of one pre-tokenized piece (raw bytes) to dst, counting its work
// to y (nil: not counted).
func (m *bpeModel) encode(piece string, dst []uint32, y *yielder) []uint32 {
	if len(piece) == 1 {
		return append(dst, m.byteTok[piece[0]])
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[piece]; ok {
			return append(dst, id)
		}
	}
	if len(piece) <= smallPiece {
		y.did(pieceWork(len(piece)))
		return m.encodeSmall(piece, dst)
	}
	return m.encodeHeap(piece, dst, y)
}

// encodeSmall merges by repeatedly taking the lowest-ranked adjacent pair, leftmost on ties,
// keeping the rank of every adjacent pair in an array so each merge costs two lookups.
// piece has 2 to smallPiece bytes.
func (m *bpeModel) encodeSmall(piece string, dst []uint32) []uint32 {
	if len(piece) <= shortPiece {
		// Most pieces are words: small arrays, which Go zeroes on every call, cost less.
		var syms [shortPiece]uint32
		var ranks [shortPiece]uint64
		return m.mergeSmall(piece, dst, syms[:], ranks[:])
	}
	var syms [smallPiece]uint32
	var ranks [smallPiece]uint64
	return m.mergeSmall(piece, dst, syms[:], ranks[:])
}

// mergeSmall is encodeSmall's loop; symBuf and rankBuf hold at least len(piece) elements.
func (m *bpeModel) mergeSmall(piece string, dst, symBuf []uint32, rankBuf []uint64) []uint32 {
	n := len(piece)
	syms := symBuf[:n]
	ranks := rankBuf[:n-1] // ranks[i]: merge value of (syms[i], syms[i+1]), or noMerge
	for i := 0; i < n; i++ {
		syms[i] = m.byteTok[piece[i]]
	}
	for i := 0; i+1 < n; i++ {
		ranks[i] = m.lookup(syms[i], syms[i+1])
	}
	for n > 1 {
		best, bi := uint64(noMerge), -1
		for i, r := range ranks[:n-1] {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		syms[bi] = uint32(best)
		copy(syms[bi+1:n-1], syms[bi+2:n])
		copy(ranks[bi:n-2], ranks[bi+1:n-1])
		n--
		if bi > 0 {
			ranks[bi-1] = m.lookup(syms[bi-1], syms[bi])
		}
		if bi < n-1 {
			ranks[bi] = m.lookup(syms[bi], syms[bi+1])
		}
	}
	return append(dst, syms[:n]...)
}

// noMerge sorts after every real (rank<<32 | id) value.
const noMerge = math.MaxUint64

func (m *bpeModel) lookup(a, b uint32) uint64 { return m.merges.get(pairKey(a, b)) }

// encodeHeap is the O(n log n) form for long pieces: a linked list of symbols, and candidate
// merges taken in (rank, position) order, with stale candidates skipped. It gives the same
// result as encodeSmall. A candidate is one word, rank<<32 | position, compared as an integer.
// The piece's first candidates are sorted once and read in order (a run of one byte is
// already sorted); only the candidates that merges make go into a heap, and each step takes
// the smaller of the two heads, so the order is the one a single heap of both would give.
// Its buffers come from heapPool, so a long piece allocates nothing (a 256 KiB one had
// allocated 7.5 MB, decision 0709). Every 1,024 candidates taken count as that many units of
// work to y (nil: not counted).
func (m *bpeModel) encodeHeap(piece string, dst []uint32, y *yielder) []uint32 {
	n := len(piece)
	sc := heapPool.Get().(*heapScratch)
	sc.grow(n)
	ids, next, prev := sc.ids[:n], sc.next[:n], sc.prev[:n]
	for i := 0; i < n; i++ {
		ids[i] = m.byteTok[piece[i]]
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
	}
	next[n-1] = -1
	first := sc.first[:0]
	sorted := true
	for i := 0; i+1 < n; i++ {
		if v := m.lookup(ids[i], ids[i+1]); v != noMerge {
			c := v&^0xFFFFFFFF | uint64(i)
			if len(first) > 0 && c < first[len(first)-1] {
				sorted = false
			}
			first = append(first, c)
		}
	}
	if !sorted {
		slices.Sort(first)
	}
	h := sc.heap[:0]
	k := 0
	for taken := 1; ; taken++ {
		if taken&1023 == 0 {
			y.did(1024)
		}
		var c uint64
		switch {
		case k < len(first) && (len(h) == 0 || first[k] < h[0]):
			c = first[k]
			k++
		case len(h) > 0:
			c = h.pop()
		default:
			goto done
		}
		p := int32(c)
		if prev[p] == dead || next[p] < 0 {
			continue
		}
		q := next[p]
		v := m.lookup(ids[p], ids[q])
		if v>>32 != c>>32 { // a rank names one merge: the same rank is the same pair
			continue
		}
		ids[p] = uint32(v)
		prev[q] = dead
		next[p] = next[q]
		if next[q] >= 0 {
			prev[next[q]] = p
		}
		if pp := prev[p]; pp >= 0 {
			if v := m.lookup(ids[pp], ids[p]); v != noMerge {
				h.push(v&^0xFFFFFFFF | uint64(pp))
			}
		}
		if nn := next[p]; nn >= 0 {
			if v := m.lookup(ids[p], ids[nn]); v != noMerge {
				h.push(v&^0xFFFFFFFF | uint64(p))
			}
		}
	}
done:
	for i := int32(0); i >= 0; i = next[i] {
		dst = append(dst, ids[i])
	}
	sc.heap, sc.first = h, first
	if n <= maxPooledPiece {
		heapPool.Put(sc)
	}
	return dst
}

// dead marks, in prev, a symbol merged into its left neighbour.
const dead = -2

// maxPooledPiece is the longest piece whose buffers go back to heapPool (28 bytes a
// byte): four times the default prompt cap, so an unusual cap does not pin a huge buffer.
const maxPooledPiece = 1 << 20

// heapScratch is encodeHeap's reusable buffers.
type heapScratch struct {
	ids        []uint32
	next, prev []int32
	first      []uint64 // the piece's first candidates, sorted
	heap       mergeHeap
}

var heapPool = sync.Pool{New: func() any { return new(heapScratch) }}

// grow makes every buffer hold at least n elements.
func (s *heapScratch) grow(n int) {
	if cap(s.ids) < n {
		s.ids = make([]uint32, n)
		s.next = make([]int32, n)
		s.prev = make([]int32, n)
		s.first = make([]uint64, 0, n)
		s.heap = make(mergeHeap, 0, n)
	}
}

// mergeHeap is a 4-ary min-heap of candidates (rank<<32 | position): half the depth of a
// binary heap, and a node's children share a cache line.
type mergeHeap []uint64

func (h mergeHeap) init() {
	for i := (len(h) - 2) / 4; i >= 0; i-- {
		h.down(i)
	}
}

func (h *mergeHeap) push(c uint64) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		parent := (i - 1) / 4
		if s[parent] <= c {
			break
		}
		s[i] = s[parent]
		i = parent
	}
	s[i] = c
}

func (h *mergeHeap) pop() uint64 {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	h.down(0)
	return top
}

func (h mergeHeap) down(i int) {
	n := len(h)
	if n == 0 {
		return
	}
	c := h[i]
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		least, lv := first, h[first]
		for j := first + 1; j < first+4 && j < n; j++ {
			if h[j] < lv {
				least, lv = j, h[j]
			}
		}
		if lv >= c {
			break
		}
		h[i] = lv
		i = least
	}
	h[i] = c
}
