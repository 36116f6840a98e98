package kvindex

import (
	"math/bits"
	"sync/atomic"
)

// ctable is table for readers that take no lock: a uint64 -> uint64 hash map in one
// flat array (16 bytes a slot), open addressing with linear probing. Keys need not be
// well distributed; every key is allowed (0 and 1, which mark empty and deleted slots,
// are kept beside the array).
//
// One writer at a time (the caller serializes put, or, del and reset) may run
// concurrently with any number of readers (get, Len, NonEmpty, touch), which take no
// lock (docs/decisions/0805). Every field a reader sees is accessed with sync/atomic,
// and the array is written so that every read sees a state the table had:
//   - a slot only goes from empty, to holding one key (its value written before its
//     key), to deleted (its key overwritten with a tombstone), so a reader that found
//     its key reads that key's value, and one that met an empty slot met the end of
//     the probe run as it was then;
//   - deleted slots are not reused; when live and deleted slots reach 85 % of the
//     array, the live entries are copied into a new array (half as large again when
//     they are more than 70 % of it, else as large), which is published at once and
//     never written again. Readers still in the old one see the state at the copy.
//
// Inserting, 20-28 bytes an entry at 10^6 entries, as table; with deletions, up to 34
// (docs/decisions/0805).
type ctable struct {
	arr      atomic.Pointer[slotArray] // nil until the first insert
	nonEmpty atomic.Bool               // Len() > 0, for readers
	side     [2]sideEntry              // keys 0 and 1
	_        linePad                   // the writer's counters change at every insert and deletion
	n        int                       // live entries in the array (writer only)
	used     int                       // live and deleted slots (writer only)
	mixed    bool                      // set before the first insert: keys are uniformly random
	_        linePad
}

// linePad keeps what writers change often off the cache lines that readers read, so a
// reader does not wait for them to move between cores (two lines: x86 fetches lines in
// pairs).
type linePad [128]byte

// The slot keys that mark empty and deleted slots.
const (
	emptyKey = 0
	tombKey  = 1
)

type slotArray struct {
	slots []cslot
	mixed bool // the table's keys are uniformly random: their home needs no finalizer
}

// cslot is a ctable's slot, as table's slot: a key and its value share a cache line.
type cslot struct{ k, v atomic.Uint64 }

// sideEntry holds key 0 or 1. Its version is odd while it is deleted, so that a reader
// never pairs "held" with the value after deletion.
type sideEntry struct {
	ver atomic.Uint64
	has atomic.Bool
	v   atomic.Uint64
}

func (e *sideEntry) get() (uint64, bool) {
	for {
		ver := e.ver.Load()
		has, v := e.has.Load(), e.v.Load()
		if ver&1 == 0 && e.ver.Load() == ver {
			return v, has
		}
	}
}

func (a *slotArray) home(k uint64) int {
	if !a.mixed {
		k = fmix(k)
	}
	hi, _ := bits.Mul64(k, uint64(len(a.slots)))
	return int(hi)
}

// lookup is get on a, for a key > tombKey (for readers that probe one array many
// times).
func (a *slotArray) lookup(k uint64) (uint64, bool) {
	for i := a.home(k); ; {
		sl := &a.slots[i]
		switch sl.k.Load() {
		case k:
			return sl.v.Load(), true
		case emptyKey:
			return 0, false
		}
		if i++; i == len(a.slots) {
			i = 0
		}
	}
}

// Len is the number of entries (writer only).
func (t *ctable) Len() int {
	n := t.n
	for i := range t.side {
		if t.side[i].has.Load() {
			n++
		}
	}
	return n
}

func (t *ctable) changed() {
	if ne := t.Len() > 0; ne != t.nonEmpty.Load() {
		t.nonEmpty.Store(ne)
	}
}

// NonEmpty reports whether the table holds an entry.
func (t *ctable) NonEmpty() bool { return t.nonEmpty.Load() }

// get returns k's value, as it was at some instant during the call.
func (t *ctable) get(k uint64) (uint64, bool) {
	if k <= tombKey {
		return t.side[k].get()
	}
	a := t.arr.Load()
	if a == nil {
		return 0, false
	}
	return a.lookup(k)
}

// touch reads k's home slot (to bring it into the cache) and returns its key.
func (t *ctable) touch(k uint64) uint64 {
	a := t.arr.Load()
	if a == nil {
		return 0
	}
	return a.slots[a.home(k)].k.Load()
}

func (t *ctable) put(k, v uint64) { t.update(k, v, false) }

// or sets bits in k's value (inserting k with bits when absent), in one probe.
func (t *ctable) or(k, bits uint64) { t.update(k, bits, true) }

// update puts v at k, or ors it into k's value.
func (t *ctable) update(k, v uint64, or bool) {
	if k <= tombKey {
		e := &t.side[k]
		if or && e.has.Load() {
			v |= e.v.Load()
		}
		e.v.Store(v)
		e.has.Store(true)
		t.changed()
		return
	}
	a := t.arr.Load()
	if a == nil || (t.used+1)*20 > len(a.slots)*17 {
		a = t.rehash()
	}
	for i := a.home(k); ; {
		sl := &a.slots[i]
		switch sl.k.Load() {
		case k:
			if or {
				v |= sl.v.Load()
			}
			sl.v.Store(v)
			return
		case emptyKey:
			sl.v.Store(v) // the value first: a reader that sees the key reads its value
			sl.k.Store(k)
			t.n++
			t.used++
			t.changed()
			return
		}
		if i++; i == len(a.slots) {
			i = 0
		}
	}
}

// rehash copies the live entries into a new array, half as large again when they fill
// more than 70 % of the old one, and publishes it.
func (t *ctable) rehash() *slotArray {
	old := t.arr.Load()
	size := 8
	if old != nil {
		size = len(old.slots)
		if t.n*10 > size*7 {
			size += size / 2
		}
	}
	a := &slotArray{slots: make([]cslot, size), mixed: t.mixed}
	if old != nil {
		for i := range old.slots {
			k := old.slots[i].k.Load()
			if k <= tombKey {
				continue
			}
			j := a.home(k)
			for a.slots[j].k.Load() != emptyKey {
				if j++; j == len(a.slots) {
					j = 0
				}
			}
			a.slots[j].v.Store(old.slots[i].v.Load())
			a.slots[j].k.Store(k)
		}
	}
	t.used = t.n
	t.arr.Store(a)
	return a
}

func (t *ctable) del(k uint64) {
	if k <= tombKey {
		if e := &t.side[k]; e.has.Load() {
			e.ver.Add(1)
			e.has.Store(false)
			e.v.Store(0)
			e.ver.Add(1)
			t.changed()
		}
		return
	}
	a := t.arr.Load()
	if a == nil {
		return
	}
	for i := a.home(k); ; {
		sl := &a.slots[i]
		switch sl.k.Load() {
		case k:
			sl.k.Store(tombKey)
			t.n--
			t.changed()
			return
		case emptyKey:
			return
		}
		if i++; i == len(a.slots) {
			i = 0
		}
	}
}

// each calls f for every entry, in no order; f must not change the table.
func (t *ctable) each(f func(k, v uint64)) {
	for k := range t.side {
		if v, ok := t.side[k].get(); ok {
			f(uint64(k), v)
		}
	}
	a := t.arr.Load()
	if a == nil {
		return
	}
	for i := range a.slots {
		if k := a.slots[i].k.Load(); k > tombKey {
			f(k, a.slots[i].v.Load())
		}
	}
}

// reset empties the table and frees its slots.
func (t *ctable) reset() {
	t.arr.Store(nil)
	t.n, t.used = 0, 0
	for k := range t.side {
		t.del(uint64(k))
	}
	t.changed()
}
