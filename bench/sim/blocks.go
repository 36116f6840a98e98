package sim

// blockPool is vLLM V1's KV block pool: a fixed set of blocks, each with a
// reference count; a full block can carry a content hash under which later
// requests find it (prefix caching). Unreferenced blocks wait in a free queue
// ordered for eviction (head first); taking a cached block from the head
// forgets its hash.
type blockPool struct {
	blocks     []block
	head, tail int32 // free queue, -1 when empty
	free       int
	cached     map[uint64]int32
}

type block struct {
	ref        int32
	hash       uint64
	hashed     bool
	prev, next int32
	inFree     bool
}

func newBlockPool(n int) *blockPool {
	p := &blockPool{blocks: make([]block, n), head: -1, tail: -1, cached: make(map[uint64]int32)}
	for i := range p.blocks {
		p.pushTail(int32(i))
	}
	return p
}

func (p *blockPool) pushTail(id int32) {
	b := &p.blocks[id]
	b.prev, b.next, b.inFree = p.tail, -1, true
	if p.tail >= 0 {
		p.blocks[p.tail].next = id
	} else {
		p.head = id
	}
	p.tail = id
	p.free++
}

func (p *blockPool) unlink(id int32) {
	b := &p.blocks[id]
	if b.prev >= 0 {
		p.blocks[b.prev].next = b.next
	} else {
		p.head = b.next
	}
	if b.next >= 0 {
		p.blocks[b.next].prev = b.prev
	} else {
		p.tail = b.prev
	}
	b.prev, b.next, b.inFree = -1, -1, false
	p.free--
}

// lookup returns the cached block holding hash, if any.
func (p *blockPool) lookup(hash uint64) (int32, bool) {
	id, ok := p.cached[hash]
	return id, ok
}

// touch takes a reference on a cached block, removing it from the free queue.
func (p *blockPool) touch(id int32) {
	if p.blocks[id].inFree {
		p.unlink(id)
	}
	p.blocks[id].ref++
}

// take pops the least recently freed block, forgetting its cached hash. The
// caller must have checked that a block is free.
func (p *blockPool) take() int32 {
	id := p.head
	p.unlink(id)
	b := &p.blocks[id]
	if b.hashed {
		delete(p.cached, b.hash)
		b.hashed = false
	}
	b.ref = 1
	return id
}

// register caches a full block under hash unless another block already holds
// that content.
func (p *blockPool) register(id int32, hash uint64) {
	if _, dup := p.cached[hash]; dup {
		return
	}
	p.blocks[id].hash, p.blocks[id].hashed = hash, true
	p.cached[hash] = id
}

// release drops one reference on each block, last block first, so that a
// request's tail blocks are evicted before its (shareable) head blocks.
func (p *blockPool) release(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		b := &p.blocks[ids[i]]
		b.ref--
		if b.ref == 0 {
			p.pushTail(ids[i])
		}
	}
}

// used is the number of blocks held by running requests.
func (p *blockPool) used() int { return len(p.blocks) - p.free }

// CachedPrefix is how many of prompt's leading tokens, in full blocks, the engine's GPU
// prefix cache holds now for adapter ("" for the base model): what the scheduler would
// find were the prompt admitted now (a diagnostic's truth; it changes nothing).
func (e *Engine) CachedPrefix(prompt []uint32, adapter string) int {
	r := Request{Tokens: prompt, Adapter: adapter}
	bs := e.cfg.BlockSize
	n := 0
	for i := 0; (i+1)*bs <= len(prompt); i++ {
		if _, ok := e.pool.lookup(r.blockHash(i, bs)); !ok {
			break
		}
		n += bs
	}
	return n
}
