package kvevents

import (
	"math/rand/v2"
	"testing"
)

// TestTableAgreesWithAMap runs random puts and deletes on a table and a Go map, with a
// small key space (long probe runs, wrap-around, keys 0 and 1, many copies to drop
// deleted slots) and a large one, for tables that leave deleted slots and compact ones.
func TestTableAgreesWithAMap(t *testing.T) {
	for _, c := range []struct {
		space   uint64
		compact bool
	}{{40, false}, {1 << 62, false}, {40, true}, {1 << 62, true}} {
		space := c.space
		rng := rand.New(rand.NewPCG(space, 9))
		var tb table
		tb.compact = c.compact
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
					t.Fatalf("op %d: Len %d, map %d", op, tb.Len(), len(ref))
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
						t.Fatalf("op %d: get(%d) = %d %v, map %d %v", op, probe, v, ok, rv, rok)
					}
				}
			}
		}
		seen := 0
		tb.each(func(k, v uint64) {
			if ref[k] != v {
				t.Fatalf("each: %d -> %d, map %d", k, v, ref[k])
			}
			seen++
		})
		if seen != len(ref) {
			t.Fatalf("each visited %d of %d", seen, len(ref))
		}
		if c.compact && tb.used != tb.n {
			t.Errorf("compact table: %d slots used for %d entries", tb.used, tb.n)
		}
		tb.reset()
		if tb.Len() != 0 || tb.NonEmpty() {
			t.Fatal("reset left entries")
		}
	}
}
