package sim

// cpuTier is LMCache's LocalCPUBackend: chunks of KV keyed by chunk key,
// bounded in tokens, evicted least recently used. A chunk is touched when it
// is stored and when a request's lookup finds it.
type cpuTier struct {
	capacity   int64
	used       int64
	entries    map[int64]*cpuEntry
	head, tail *cpuEntry // head = least recently used
}

type cpuEntry struct {
	key        int64
	tokens     int64
	prev, next *cpuEntry
}

func newCPUTier(capacityTokens int64) *cpuTier {
	return &cpuTier{capacity: capacityTokens, entries: make(map[int64]*cpuEntry)}
}

func (c *cpuTier) contains(key int64) bool {
	_, ok := c.entries[key]
	return ok
}

func (c *cpuTier) unlink(e *cpuEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (c *cpuTier) pushTail(e *cpuEntry) {
	e.prev = c.tail
	if c.tail != nil {
		c.tail.next = e
	} else {
		c.head = e
	}
	c.tail = e
}

// touch marks key most recently used.
func (c *cpuTier) touch(key int64) {
	if e, ok := c.entries[key]; ok {
		c.unlink(e)
		c.pushTail(e)
	}
}

// store inserts a chunk, evicting least recently used chunks to make room; it
// appends the evicted keys to evicted and reports whether the chunk was stored
// (false when it is present already or larger than the tier).
func (c *cpuTier) store(key int64, tokens int64, evicted []int64) ([]int64, bool) {
	if _, ok := c.entries[key]; ok || tokens > c.capacity {
		return evicted, false
	}
	for c.used+tokens > c.capacity {
		victim := c.head
		c.unlink(victim)
		delete(c.entries, victim.key)
		c.used -= victim.tokens
		evicted = append(evicted, victim.key)
	}
	e := &cpuEntry{key: key, tokens: tokens}
	c.entries[key] = e
	c.pushTail(e)
	c.used += tokens
	return evicted, true
}
