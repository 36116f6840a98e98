package tokenize

import (
	"math/rand/v2"
	"testing"
)

func TestMergeTable(t *testing.T) {
	tests := []struct {
		name string
		puts [][2]uint64 // key, value in order
		get  uint64
		want uint64
	}{
		{"absent pair", nil, pairKey(1, 2), noMerge},
		{"present pair", [][2]uint64{{pairKey(1, 2), 7}}, pairKey(1, 2), 7},
		{"the reversed pair is another pair", [][2]uint64{{pairKey(1, 2), 7}}, pairKey(2, 1), noMerge},
		{"a later duplicate wins", [][2]uint64{{pairKey(1, 2), 7}, {pairKey(1, 2), 9}}, pairKey(1, 2), 9},
		{"pair of id 0", [][2]uint64{{pairKey(0, 0), 3}}, pairKey(0, 0), 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMergeTable(len(tt.puts))
			for _, p := range tt.puts {
				m.put(p[0], p[1])
			}
			if got := m.get(tt.get); got != tt.want {
				t.Fatalf("get = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestMergeTableMatchesMap fills the table to its size with colliding-prone keys and checks
// every lookup, present and absent, against a Go map.
func TestMergeTableMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 50000
	m := newMergeTable(n)
	ref := make(map[uint64]uint64, n)
	for len(ref) < n {
		k := pairKey(r.Uint32N(4096), r.Uint32N(4096))
		v := r.Uint64N(1 << 40)
		m.put(k, v)
		ref[k] = v
	}
	for k, v := range ref {
		if got := m.get(k); got != v {
			t.Fatalf("get(%x) = %d, want %d", k, got, v)
		}
	}
	for range n {
		k := pairKey(r.Uint32N(8192), r.Uint32N(8192))
		want, ok := ref[k]
		if !ok {
			want = noMerge
		}
		if got := m.get(k); got != want {
			t.Fatalf("get(%x) = %d, want %d", k, got, want)
		}
	}
}
