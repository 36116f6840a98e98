package kvindex

import (
	"math/rand/v2"
	"testing"
)

// hashMap is what table and ctable have in common.
type hashMap interface {
	get(k uint64) (uint64, bool)
	put(k, v uint64)
	or(k, bits uint64)
	del(k uint64)
	Len() int
	each(f func(k, v uint64))
	reset()
}

// TestTableAgreesWithAMap runs random puts and deletes on a table, a ctable and a Go map,
// with a small key space (long probe runs, wrap-around, keys 0 and 1, for the ctable
// many copies to drop deleted slots) and a large one.
func TestTableAgreesWithAMap(t *testing.T) {
	for _, space := range []uint64{40, 1 << 62} {
		for _, tb := range []hashMap{new(table), new(ctable)} {
			agreeWithMap(t, tb, space)
		}
	}
}

func agreeWithMap(t *testing.T, tb hashMap, space uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(space, 9))
	ref := map[uint64]uint64{}
	for op := 0; op < 200000; op++ {
		k := rng.Uint64N(space)
		switch rng.IntN(4) {
		case 3:
			bits := rng.Uint64()
			tb.or(k, bits)
			ref[k] |= bits
		case 0, 1:
			v := rng.Uint64()
			tb.put(k, v)
			ref[k] = v
		case 2:
			tb.del(k)
			delete(ref, k)
		}
		if op%1000 == 0 || space == 40 {
			if tb.Len() != len(ref) {
				t.Fatalf("%T, op %d: Len %d, map %d", tb, op, tb.Len(), len(ref))
			}
			probes := []uint64{rng.Uint64N(space)}
			if space == 40 {
				probes = probes[:0]
				for p := range space {
					probes = append(probes, p)
				}
			}
			for _, probe := range probes {
				v, ok := tb.get(probe)
				if rv, rok := ref[probe]; ok != rok || v != rv {
					t.Fatalf("%T, op %d: get(%d) = %d %v, map %d %v", tb, op, probe, v, ok, rv, rok)
				}
			}
		}
	}
	seen := 0
	tb.each(func(k, v uint64) {
		if ref[k] != v {
			t.Fatalf("%T, each: %d -> %d, map %d", tb, k, v, ref[k])
		}
		seen++
	})
	if seen != len(ref) {
		t.Fatalf("%T, each visited %d of %d", tb, seen, len(ref))
	}
	tb.reset()
	if tb.Len() != 0 {
		t.Fatalf("%T: reset left entries", tb)
	}
	if c, ok := tb.(*ctable); ok && c.NonEmpty() {
		t.Fatal("ctable: reset left it non-empty")
	}
}

// TestTableReserve: a reserved table takes its entries without growing, keeps the ones
// it had, and a second, smaller reserve changes nothing.
func TestTableReserve(t *testing.T) {
	var tb table
	tb.put(7, 70)
	tb.reserve(1000)
	size := len(tb.slots)
	tb.reserve(10)
	for k := uint64(1); k <= 1000; k++ {
		tb.put(k*0x9e3779b97f4a7c15, k)
	}
	if len(tb.slots) != size {
		t.Errorf("grew from %d to %d slots within the reserve", size, len(tb.slots))
	}
	if v, ok := tb.get(7); !ok || v != 70 {
		t.Errorf("the entry before the reserve: %d, %v", v, ok)
	}
	for k := uint64(1); k <= 1000; k++ {
		if v, ok := tb.get(k * 0x9e3779b97f4a7c15); !ok || v != k {
			t.Fatalf("entry %d: %d, %v", k, v, ok)
		}
	}
}
