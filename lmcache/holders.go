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

func (h holders) has(id uint32) bool {
	if h.a == id || h.b == id {
		return true
	}
	return h.more != nil && slices.Contains(*h.more, id)
}

// add appends id unless present; it reports whether id was added.
func (h holders) add(id uint32) (holders, bool) {
	switch {
	case h.has(id):
		return h, false
	case h.a == 0:
		h.a = id
	case h.b == 0:
		h.b = id
	case h.more == nil:
		h.more = &[]uint32{id}
	default:
		*h.more = append(*h.more, id)
	}
	return h, true
}

// remove deletes id, keeping the others in order; it reports whether id was present.
func (h holders) remove(id uint32) (holders, bool) {
	if h.more == nil {
		switch id {
		case h.a:
			return holders{a: h.b, used: h.used}, id != 0
		case h.b:
			return holders{a: h.a, used: h.used}, id != 0
		}
		return h, false
	}
	all := h.appendTo(make([]uint32, 0, 8))
	i := slices.Index(all, id)
	if i < 0 {
		return h, false
	}
	all = slices.Delete(all, i, i+1)
	out := holders{used: h.used}
	for _, x := range all {
		out, _ = out.add(x)
	}
	return out, true
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
