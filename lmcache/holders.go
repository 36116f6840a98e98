package lmcache

import "slices"

// holders lists the slots (worker x location) holding one key, in admission order. The
// first two live inline, so that the common case costs no allocation; slot ids start at
// 1, so 0 marks an empty place. The others live in the shard's overflow lists, at index
// more-1 (more 0: none), so a holders holds no pointer: the key table's maps, one entry
// per key, are then memory the collector does not scan (decision 1113: a full collection
// over 640k keys took 2.8 ms of CPU with a pointer per entry, 0.1 ms without).
//
// used is the index's logical clock when the key was last admitted or looked up (the
// memory budget evicts the least recently used keys first).
//
// The methods that read or edit the overflow are the shard's, under its lock.
type holders struct {
	a, b uint32
	used uint32
	more uint32
}

// empty reports whether no slot holds the key.
func (h holders) empty() bool { return h.a == 0 }

// count returns how many slots hold h's key.
func (sh *shard) count(h holders) int {
	switch {
	case h.a == 0:
		return 0
	case h.b == 0:
		return 1
	case h.more == 0:
		return 2
	}
	return 2 + len(sh.lists[h.more-1])
}

// add appends id, which the caller knows is not present (the holding slot's own key set
// says so), so a key held by thousands of slots costs no scan per admit.
func (sh *shard) add(h holders, id uint32) holders {
	switch {
	case h.a == 0:
		h.a = id
	case h.b == 0:
		h.b = id
	case h.more == 0:
		h.more = sh.newList(id)
	default:
		sh.lists[h.more-1] = append(sh.lists[h.more-1], id)
	}
	return h
}

// newList returns the index (+1) of a new overflow list holding id, reusing a freed one.
func (sh *shard) newList(id uint32) uint32 {
	if n := len(sh.free); n > 0 {
		i := sh.free[n-1]
		sh.free = sh.free[:n-1]
		sh.lists[i] = append(sh.lists[i], id)
		return i + 1
	}
	sh.lists = append(sh.lists, []uint32{id})
	return uint32(len(sh.lists))
}

// freeList releases an emptied overflow list, keeping a small one's memory for reuse.
func (sh *shard) freeList(more uint32) {
	i := more - 1
	if cap(sh.lists[i]) > 64 {
		sh.lists[i] = nil
	}
	sh.lists[i] = sh.lists[i][:0]
	sh.free = append(sh.free, i)
}

// remove deletes id, keeping the others in order; it reports whether id was present. The
// overflow list is edited in place: readers copy it under the shard's read lock.
func (sh *shard) remove(h holders, id uint32) (holders, bool) {
	if id == 0 {
		return h, false
	}
	var more []uint32
	if h.more != 0 {
		more = sh.lists[h.more-1]
	}
	switch id {
	case h.a:
		h.a, h.b = h.b, 0
	case h.b:
		h.b = 0
	default:
		i := slices.Index(more, id)
		if i < 0 {
			return h, false
		}
		more = slices.Delete(more, i, i+1)
		sh.lists[h.more-1] = more
		if len(more) == 0 {
			sh.freeList(h.more)
			h.more = 0
		}
		return h, true
	}
	if len(more) > 0 { // refill the inline place from the overflow, in order
		h.b = more[0]
		more = slices.Delete(more, 0, 1)
		sh.lists[h.more-1] = more
		if len(more) == 0 {
			sh.freeList(h.more)
			h.more = 0
		}
	}
	return h, true
}

// appendTo appends the slots of h, in order, to dst.
func (sh *shard) appendTo(h holders, dst []uint32) []uint32 {
	if h.a == 0 {
		return dst
	}
	dst = append(dst, h.a)
	if h.b == 0 {
		return dst
	}
	dst = append(dst, h.b)
	if h.more != 0 {
		dst = append(dst, sh.lists[h.more-1]...)
	}
	return dst
}
