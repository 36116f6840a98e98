package kvindex

import "testing"

func TestChainDependsOnEverything(t *testing.T) {
	base := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	k := chain(7, 99, base)
	variants := map[string]uint64{
		"another parent":     chain(8, 99, base),
		"another seed":       chain(7, 98, base),
		"one token changed":  chain(7, 99, append(append([]uint32{}, base[:15]...), 17)),
		"two tokens swapped": chain(7, 99, append([]uint32{2, 1}, base[2:]...)),
		"lanes swapped":      chain(7, 99, append([]uint32{3, 4, 1, 2}, base[4:]...)),
		"one token less":     chain(7, 99, base[:15]),
		"a zero token more":  chain(7, 99, append(append([]uint32{}, base...), 0)),
	}
	for name, v := range variants {
		if v == k {
			t.Errorf("%s: same key %#x", name, k)
		}
	}
}

// TestStrHashDependsOnEverything: an adapter's or salt's hash changes with any byte, the
// length (a trailing zero byte), the position of a byte and the seed, on both sides of
// the 16-byte groups.
func TestStrHashDependsOnEverything(t *testing.T) {
	for _, s := range []string{"", "a", "sql-lora", "exactly-16-bytes", "a-name-longer-than-16-bytes-0123"} {
		k := strHash(7, s)
		variants := map[string]uint64{"another seed": strHash(8, s), "a zero byte more": strHash(7, s+"\x00")}
		if s != "" {
			b := []byte(s)
			b[len(b)-1] ^= 1
			variants["last byte changed"] = strHash(7, string(b))
			variants["one byte less"] = strHash(7, s[:len(s)-1])
			if len(s) > 1 {
				variants["first two swapped"] = strHash(7, s[1:2]+s[:1]+s[2:])
			}
		}
		for name, v := range variants {
			if v == k {
				t.Errorf("%q: %s: same hash %#x", s, name, k)
			}
		}
	}
}

// BenchmarkPromptKeys measures the keys of a 1,578-token prompt in 16-token blocks.
func BenchmarkPromptKeys(b *testing.B) {
	ix, _ := NewIndex(IndexConfig{Seed: 1})
	p := make([]uint32, 1578)
	for i := range p {
		p[i] = uint32(i)
	}
	for b.Loop() {
		ix.promptKeys(p, benchBlock)
	}
}

// TestChainUnrolledAgreesWithLoop checks the 16-token fast path against the general loop
// (the same block hashed as 16 tokens and, with a 17th token dropped, through the loop).
func TestChainUnrolledAgreesWithLoop(t *testing.T) {
	toks := make([]uint32, 17)
	for i := range toks {
		toks[i] = uint32(i*2654435761) ^ 0xdeadbeef
	}
	if got, want := chain(5, 77, toks[:16]), chainLoop(5, 77, toks[:16]); got != want {
		t.Fatalf("unrolled %#x, loop %#x", got, want)
	}
}

// TestAppendChain16AgreesWithChain checks the prompt path for 16-token blocks against
// chaining the blocks one by one through the general loop.
func TestAppendChain16AgreesWithChain(t *testing.T) {
	toks := make([]uint32, 16*7)
	for i := range toks {
		toks[i] = uint32(i*2654435761) ^ 0x5bd1e995
	}
	got := appendChain16([]uint64{42}, 9, 31, toks)
	want := []uint64{42}
	parent := uint64(9)
	for j := 0; j < 7; j++ {
		parent = chainLoop(parent, 31, toks[j*16:(j+1)*16])
		want = append(want, parent)
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys, want %d", len(got), len(want))
	}
	for j := range want {
		if got[j] != want[j] {
			t.Errorf("key %d: %#x, want %#x", j, got[j], want[j])
		}
	}
}
