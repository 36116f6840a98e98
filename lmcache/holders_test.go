package lmcache

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// A key's holders, kept inline and in the shard's overflow lists, are the slots admitted
// and not removed, in admission order, through random admits and removals over many keys
// of one shard (so that overflow lists are freed and reused between keys).
func TestHoldersFollowAReferenceList(t *testing.T) {
	for _, c := range []struct {
		name         string
		keys, slots  int
		steps        int
		removeChance int // percent of steps that remove
	}{
		{"few holders per key", 50, 4, 4000, 40},
		{"long lists", 5, 400, 20000, 45},
		{"lists emptied and refilled", 30, 12, 20000, 55},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.keys), uint64(c.slots)))
			var sh shard
			hs := make([]holders, c.keys)
			want := make([][]uint32, c.keys)
			for step := range c.steps {
				k := r.IntN(c.keys)
				id := uint32(1 + r.IntN(c.slots))
				if r.IntN(100) < c.removeChance {
					h, ok := sh.remove(hs[k], id)
					i := slices.Index(want[k], id)
					if ok != (i >= 0) {
						t.Fatalf("step %d: remove(%d) reported %v, want %v", step, id, ok, i >= 0)
					}
					if ok {
						want[k] = slices.Delete(want[k], i, i+1)
					}
					hs[k] = h
				} else if !slices.Contains(want[k], id) {
					hs[k] = sh.add(hs[k], id)
					want[k] = append(want[k], id)
				}
				got := sh.appendTo(hs[k], nil)
				if !slices.Equal(got, want[k]) || sh.count(hs[k]) != len(want[k]) || hs[k].empty() != (len(want[k]) == 0) {
					t.Fatalf("step %d: key %d holds %v (count %d), want %v", step, k, got, sh.count(hs[k]), want[k])
				}
			}
			inUse := 0
			for _, h := range hs {
				if h.more != 0 {
					inUse++
				}
			}
			if len(sh.lists)-len(sh.free) != inUse {
				t.Fatalf("%d overflow lists, %d free, %d in use: a list leaked", len(sh.lists), len(sh.free), inUse)
			}
		})
	}
}

// The key table's entries hold no pointer, so the collector does not scan its maps.
func TestHoldersHoldNoPointer(t *testing.T) {
	ty := reflect.TypeFor[holders]()
	for i := range ty.NumField() {
		if f := ty.Field(i); f.Type.Kind() != reflect.Uint32 {
			t.Errorf("holders.%s is a %s: the table's entries must be numbers only", f.Name, f.Type)
		}
	}
}
