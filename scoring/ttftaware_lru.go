package scoring

// lruSpan is how many routings of chunks an endpoint's chunkLRU tells apart: at 256
// tokens a chunk, 8,192 of them are 2 million tokens routed there, five times the largest
// GPU KV pool an A10 gives Qwen2.5-3B (about 390,000 tokens at gpu_memory_utilization
// 0.9, maxChunks' note). A chunk not routed there again in that many is presumed evicted.
// 32 KB an endpoint, only on a fleet that publishes no KV events.
const lruSpan = 1 << 13

// chunkLRU is one endpoint's prefix cache as this picker filled it, in the order vLLM
// evicts it: each routing there of a chunk of a prompt, or of a prompt's tokens past its
// last full chunk, takes a position, weighing its tokens, a prompt's in the order vLLM
// frees a finished request's blocks (its last first, so its first chunk is the most
// recent); a chunk routed there again leaves its old position (weight 0), as a reused
// block leaves vLLM's free queue and returns to its tail. The weight at the positions
// after a chunk's is then the distinct prompt tokens sent to the endpoint since the chunk
// was (since): the blocks used after it, which vLLM evicts after it.
//
// The weights are kept in a Fenwick tree over the last lruSpan positions (a ring), so
// taking a position and asking a chunk's since cost O(log lruSpan) and allocate nothing.
type chunkLRU struct {
	base uint64           // the position before the first this endpoint took: older ones were another life's
	seq  uint64           // the last position taken
	tree [lruSpan]float32 // token sums below 2^24 (lruSpan x presumeChunk): exact
}

// newChunkLRU returns an endpoint's empty LRU whose positions come after base.
func newChunkLRU(base uint64) *chunkLRU { return &chunkLRU{base: base, seq: base} }

// add adds v to the weight at ring index i.
func (l *chunkLRU) add(i int, v float32) {
	for j := i + 1; j <= lruSpan; j += j & -j {
		l.tree[j-1] += v
	}
}

// prefix is the weight at ring indexes [0, i).
func (l *chunkLRU) prefix(i int) float32 {
	var s float32
	for j := i; j > 0; j -= j & -j {
		s += l.tree[j-1]
	}
	return s
}

// live says whether pos was taken in this life and the ring still holds it.
func (l *chunkLRU) live(pos uint64) bool {
	return pos > l.base && pos <= l.seq && l.seq-pos < lruSpan
}

// zero drops the weight at ring index i.
func (l *chunkLRU) zero(i int) {
	if v := l.at(i); v != 0 {
		l.add(i, -v)
	}
}

// at is the weight at ring index i: prefix(i+1) - prefix(i), found from the tree node
// ending at i less its sub-ranges before i (the sums are whole numbers, so exactly), in
// fewer steps than the two prefixes.
func (l *chunkLRU) at(i int) float32 {
	j := i + 1
	v := l.tree[j-1]
	for k, stop := j-1, j-(j&-j); k > stop; k -= k & -k {
		v -= l.tree[k-1]
	}
	return v
}

// reserve takes the next n positions, weighing nothing yet, and returns the first; the
// positions lruSpan before them are forgotten.
func (l *chunkLRU) reserve(n int) uint64 {
	first := l.seq + 1
	for range n {
		l.seq++
		l.zero(int(l.seq % lruSpan))
	}
	return first
}

// put gives pos, a position reserve returned, tokens' weight (nothing once forgotten).
func (l *chunkLRU) put(pos uint64, tokens int) {
	if l.live(pos) {
		l.add(int(pos%lruSpan), float32(tokens))
	}
}

// leave drops the weight at pos, a chunk's old position when it is routed there again
// (nothing when pos is forgotten or not this life's).
func (l *chunkLRU) leave(pos uint64) {
	if l.live(pos) {
		l.zero(int(pos % lruSpan))
	}
}

// since is the weight at the positions after pos: the distinct prompt tokens routed to
// the endpoint since the chunk at pos. It is -1 for a position not of this life (taken
// before the endpoint was forgotten, or never) and for one the ring forgot (lruSpan
// routings of chunks ago): it holds nothing. (Counting only the ring's weight for the
// latter, the least its since can be, presumed 5% of the holdings on held-out draw
// 20261208's h03 wrongly, against 0.2% this way: decision 1690.)
func (l *chunkLRU) since(pos uint64) float64 {
	if !l.live(pos) {
		return -1
	}
	a, b := int(pos%lruSpan)+1, int(l.seq%lruSpan)+1
	if a <= b {
		return float64(l.prefix(b) - l.prefix(a))
	}
	return float64(l.prefix(lruSpan) - l.prefix(a) + l.prefix(b))
}
