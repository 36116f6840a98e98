//go:build !race

package kvindex

import "testing"

// TestAppendMatchAllocatesNothing: a lookup into a reused result allocates nothing, and
// Match at most its result (the race detector's sync.Pool drops items, hence the build
// tag).
func TestAppendMatchAllocatesNothing(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{Seed: 4})
	ix.Apply("a", batch(stored(0, 3, 100)))
	ix.Apply("b", batch(stored(0, 2, 200)))
	eps := []string{"b", "a"}
	var ms []Match
	if n := testing.AllocsPerRun(100, func() { ms = ix.AppendMatch(ms[:0], prompt, eps) }); n != 0 {
		t.Errorf("AppendMatch into a reused result: %v allocations a lookup", n)
	}
	k := Key{Adapter: "sql-lora", Salt: "tenant-7"}
	if n := testing.AllocsPerRun(100, func() { ms = ix.AppendMatchKey(ms[:0], prompt, k, eps) }); n != 0 {
		t.Errorf("AppendMatchKey with an adapter and a salt into a reused result: %v allocations a lookup", n)
	}
	// At most: the compiler may keep a small result that does not escape on the stack.
	if n := testing.AllocsPerRun(100, func() { ix.Match(prompt, eps) }); n > 1 {
		t.Errorf("Match: %v allocations a lookup, want at most 1 (its result)", n)
	}
}
