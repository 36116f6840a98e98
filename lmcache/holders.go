package lmcache

import "slices"

// holders lists the slots (worker x location) holding one key, in admission order. The
// first two live inline so that the common case costs no allocation; slot ids start at 1,
// so 0 marks an empty place.
//
// used is the index's logical clock when the key was last admitted or looked up (the
// memory budget evicts the least recently used keys first).
type holders struct {
	a, b uint32
	used uint32
	more *[]uint32
}

func (h holders) len() int {
	switch {
	case h.a == 0:
		return 0
	case h.b == 0:
		return 1
	case h.more == nil:
		return 2
	}
	return 2 + len(*h.more)
}

// add appends id, which the caller knows is not present (the holding slot's own key set
// says so), so a key held by thousands of slots costs no scan per admit.
func (h holders) add(id uint32) holders {
	switch {
	case h.a == 0:
		h.a = id
	case h.b == 0:
		h.b = id
	case h.more == nil:
		h.more = &[]uint32{id}
	default:
		*h.more = append(*h.more, id)
	}
	return h
}

// remove deletes id, keeping the others in order; it reports whether id was present. The
// overflow list is edited in place: readers copy it under the shard's read lock.
func (h holders) remove(id uint32) (holders, bool) {
	if id == 0 {
		return h, false
	}
	more := []uint32(nil)
	if h.more != nil {
		more = *h.more
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
		*h.more = slices.Delete(more, i, i+1)
		if len(*h.more) == 0 {
			h.more = nil
		}
		return h, true
	}
	if len(more) > 0 { // refill the inline place from the overflow, in order
		h.b = more[0]
		*h.more = slices.Delete(more, 0, 1)
		if len(*h.more) == 0 {
			h.more = nil
		}
	}
	return h, true
}

func (h holders) appendTo(dst []uint32) []uint32 {
	if h.a == 0 {
		return dst
	}
	dst = append(dst, h.a)
	if h.b == 0 {
		return dst
	}
	dst = append(dst, h.b)
	if h.more != nil {
		dst = append(dst, *h.more...)
	}
	return dst
}
