package kvindex

import "math/bits"

// table is a uint64 -> uint64 hash map in two flat arrays (16 bytes a slot), open
// addressing with linear probing and backward-shift deletion, grown by half when 85%
// full: 20-28 bytes an entry where a Go map takes about 38 at 10^6 entries (see
// docs/decisions/0802). Keys need not be well distributed; the zero key is allowed.
// It is not safe for concurrent use: a stream's engine hashes, which only writers read
// (under the index's lock), are kept in one; the tables lookups read are ctables.
type table struct {
	slots   []slot // key 0 marks an empty slot; the zero key lives in zero/hasZero
	n       int    // entries in the slots
	zero    uint64
	hasZero bool
}

// slot is one entry; a key and its value share a cache line, so a probe that finds its
// key at home misses the cache once.
type slot struct{ k, v uint64 }

func (t *table) home(k uint64) int {
	hi, _ := bits.Mul64(fmix(k), uint64(len(t.slots)))
	return int(hi)
}

// Len is the number of entries.
func (t *table) Len() int {
	if t.hasZero {
		return t.n + 1
	}
	return t.n
}

func (t *table) get(k uint64) (uint64, bool) {
	if k == 0 {
		return t.zero, t.hasZero
	}
	if len(t.slots) == 0 {
		return 0, false
	}
	for i := t.home(k); ; {
		switch t.slots[i].k {
		case k:
			return t.slots[i].v, true
		case 0:
			return 0, false
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// touch reads k's home slot (to bring it into the cache) and returns its key.
func (t *table) touch(k uint64) uint64 {
	if len(t.slots) == 0 {
		return 0
	}
	return t.slots[t.home(k)].k
}

func (t *table) put(k, v uint64) { *t.ref(k) = v }

// or sets bits in k's value (inserting k with bits when absent), in one probe.
func (t *table) or(k, bits uint64) { *t.ref(k) |= bits }

// ref returns where k's value lives, inserting k with the value 0 when absent (one probe;
// the table may grow first, so the pointer is good until the next insertion).
func (t *table) ref(k uint64) *uint64 {
	if k == 0 {
		t.hasZero = true
		return &t.zero
	}
	if (t.n+1)*20 > len(t.slots)*17 {
		t.grow()
	}
	for i := t.home(k); ; {
		switch t.slots[i].k {
		case k:
			return &t.slots[i].v
		case 0:
			t.slots[i] = slot{k: k}
			t.n++
			return &t.slots[i].v
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// reserve makes room for n entries without growing. Entries inserted in another table's
// slot order (its home order, which is the same in any table) pile up at the front of
// a table that grows as they come: importing a 10^5-block stream spent 2.3 s probing
// without it (docs/decisions/0850).
func (t *table) reserve(n int) {
	size := n*20/17 + 8
	if size <= len(t.slots) {
		return
	}
	old := t.slots
	t.slots, t.n = make([]slot, size), 0
	for _, e := range old {
		if e.k != 0 {
			t.put(e.k, e.v)
		}
	}
}

func (t *table) grow() {
	old := t.slots
	size := max(8, len(old)+len(old)/2)
	t.slots, t.n = make([]slot, size), 0
	for _, e := range old {
		if e.k != 0 {
			t.put(e.k, e.v)
		}
	}
}

func (t *table) del(k uint64) {
	if k == 0 {
		t.zero, t.hasZero = 0, false
		return
	}
	if len(t.slots) == 0 {
		return
	}
	i := t.home(k)
	for t.slots[i].k != k {
		if t.slots[i].k == 0 {
			return
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	// Backward shift: move later entries of the probe run into the hole when their home
	// is not between the hole and their slot (cyclically).
	for j := i; ; {
		if j++; j == len(t.slots) {
			j = 0
		}
		if t.slots[j].k == 0 {
			break
		}
		h := t.home(t.slots[j].k)
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}

// each calls f for every entry, in no order; f must not change the table.
func (t *table) each(f func(k, v uint64)) {
	if t.hasZero {
		f(0, t.zero)
	}
	for _, e := range t.slots {
		if e.k != 0 {
			f(e.k, e.v)
		}
	}
}

// reset empties the table and frees its slots.
func (t *table) reset() { *t = table{} }
