package kvindex

import (
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// flood is n BlockStored events of one block each, chains of their own that never
// repeat (as an engine that never sends BlockRemoved), with engine hashes from base.
func flood(n int, base uint64) []Event {
	evs := make([]Event, n)
	for i := range evs {
		toks := []uint32{uint32(i), uint32(i >> 16), 7, 9}
		evs[i] = Event{Kind: BlockStored, BlockSize: bs, Tokens: toks, Medium: "GPU", Hashes: []uint64{base + uint64(i)}}
	}
	return evs
}

func budgetDropped(ix *Index) float64 {
	return testutil.ToFloat64(ix.m.dropped.WithLabelValues(DropBudget))
}

// TestBudgetFloodKeepsOthers: one endpoint storing blocks without end stays within the
// budget, the budget drops are counted, and other endpoints keep every block and match.
func TestBudgetFloodKeepsOthers(t *testing.T) {
	const budget, n = 64, 20_000
	reg := prometheus.NewRegistry()
	ix, err := NewIndex(IndexConfig{Seed: 1, MaxBlocks: budget, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ix.Apply("b", batch(stored(0, 6, 100)))
	ix.Apply("c", batch(stored(0, 3, 100)))
	evs := flood(n, 1000)
	for i := 0; i < n; i += 100 {
		ix.Apply("a", batch(evs[i:i+100]...))
	}
	a := ix.streams[streamID{"a", 0}]
	if got := a.engine.Len(); got != budget {
		t.Errorf("flooding stream holds %d blocks, want the budget %d", got, budget)
	}
	if got, want := ix.Blocks(), budget+6+3; got != want {
		t.Errorf("Blocks = %d, want %d", got, want)
	}
	if got, want := ix.held[GPU].Len(), budget+6+3; got > want {
		t.Errorf("GPU table holds %d entries, want at most %d", got, want)
	}
	if got := len(a.order) - a.head; got > 2*1024 {
		t.Errorf("store order holds %d hashes", got)
	}
	if got, want := budgetDropped(ix), float64(n-budget); got != want {
		t.Errorf("dropped{budget} = %v, want %v", got, want)
	}
	got := ix.Match(prompt, []string{"b", "c", "a"})
	if got[0].Matched != 6*bs || got[1].Matched != 3*bs || got[2].Matched != 0 {
		t.Errorf("matches %+v, want b 6 and c 3 blocks of %d tokens", got, bs)
	}
	// The flood's newest blocks are held, its oldest dropped.
	newest, oldest := evs[n-1], evs[0]
	if m := ix.Match(newest.Tokens, []string{"a"}); m[0].Matched != bs {
		t.Errorf("newest flood block: %+v, want held", m)
	}
	if m := ix.Match(oldest.Tokens, []string{"a"}); m[0].Matched != 0 {
		t.Errorf("oldest flood block: %+v, want dropped", m)
	}
}

// TestBudgetDropsTheOldestChainFirst: over the budget the least recently stored blocks
// go, the chain's first block with them, and its blocks still held are not credited.
func TestBudgetDropsTheOldestChainFirst(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{Seed: 1, MaxBlocks: 4})
	ix.Apply("a", batch(stored(0, 4, 100)))
	if m := ix.Match(prompt, []string{"a"}); m[0].Matched != 4*bs {
		t.Fatalf("within the budget: %+v, want %d", m, 4*bs)
	}
	other := flood(2, 900)
	ix.Apply("a", batch(other...)) // 6 blocks: 100 and 101 go
	s := ix.streams[streamID{"a", 0}]
	for h, want := range map[uint64]bool{100: false, 101: false, 102: true, 103: true, 900: true, 901: true} {
		if _, held := s.engine.get(h); held != want {
			t.Errorf("engine hash %d held %v, want %v", h, held, want)
		}
	}
	if m := ix.Match(prompt, []string{"a"}); m[0].Matched != 0 || m[0].HolderRank != -1 {
		t.Errorf("after the first blocks were dropped: %+v, want no credit", m)
	}
	if m := ix.Match(other[1].Tokens, []string{"a"}); m[0].Matched != bs {
		t.Errorf("the newer block: %+v, want held", m)
	}
	if got := budgetDropped(ix); got != 2 {
		t.Errorf("dropped{budget} = %v, want 2", got)
	}
	// A removal of a dropped block is unknown, and a store on it has no parent.
	ix.Apply("a", batch(removed("GPU", 100), stored(4, 5, 100)))
	if got := testutil.ToFloat64(ix.m.blocks.WithLabelValues(OutRemovedUnknown)); got != 1 {
		t.Errorf("removed_unknown = %v, want 1", got)
	}
	ix.Apply("a", batch(stored(1, 2, 100))) // parent 100 was dropped
	if got := testutil.ToFloat64(ix.m.blocks.WithLabelValues(OutUnknownParent)); got != 1 {
		t.Errorf("refused_unknown_parent = %v, want 1", got)
	}
}

// TestBudgetNeverCreditsADroppedBlock stores, removes and floods at random on two ranks
// with a budget smaller than the prompt, with and without a second tier and owners, and
// checks after every batch that the endpoint is credited exactly the longest prefix of the
// prompt's blocks a rank still holds (by engine hash), that each rank holds at most the
// budget, and that the store order stays bounded.
func TestBudgetNeverCreditsADroppedBlock(t *testing.T) {
	const budget = 3
	r := rand.New(rand.NewPCG(1, 2))
	ix, _ := NewIndex(IndexConfig{Seed: 5, MaxBlocks: budget, Credits: Credits{GPU: 1, CPU: 1}})
	extra := flood(1000, 5000)
	next := 0
	for step := range 3000 {
		rank := r.IntN(2)
		var ev Event
		switch r.IntN(5) {
		case 0, 1: // a piece of the prompt's chain, from a block whose parent may be held
			from := r.IntN(6)
			ev = stored(from, from+1+r.IntN(6-from), 100)
		case 2:
			ev = removed([]string{"GPU", "CPU"}[r.IntN(2)], 100+uint64(r.IntN(6)), 100+uint64(r.IntN(6)))
		case 3: // a copy in the CPU tier, maybe by a secondary owner
			ev = Event{Kind: BlockStored, Medium: "CPU", Hashes: []uint64{100 + uint64(r.IntN(6))}}
			if r.IntN(2) == 0 {
				ev.Ownership = "offload"
			}
		case 4:
			ev = extra[next%len(extra)]
			next++
		}
		ix.Apply("a", Batch{DPRank: rank, Events: []Event{ev}})
		best := 0
		for rk := range 2 {
			s := ix.streams[streamID{"a", rk}]
			if s == nil {
				continue
			}
			held := 0
			for held < 6 {
				if _, ok := s.engine.get(100 + uint64(held)); !ok {
					break
				}
				held++
			}
			best = max(best, held)
			if s.engine.Len() > budget {
				t.Fatalf("step %d: rank %d holds %d blocks", step, rk, s.engine.Len())
			}
			if len(s.order)-s.head > 2*1024+1 {
				t.Fatalf("step %d: rank %d keeps %d hashes in order", step, rk, len(s.order)-s.head)
			}
		}
		if m := ix.Match(prompt, []string{"a"}); m[0].Matched != best*bs {
			t.Fatalf("step %d: credited %d tokens, the best rank holds a prefix of %d blocks", step, m[0].Matched, best)
		}
	}
	if budgetDropped(ix) == 0 {
		t.Error("no block was dropped over the budget: the test did not reach it")
	}
}

// TestBudgetOrderBoundedUnderChurn: an engine that stores and removes the same block
// without end keeps its store order within bounds.
func TestBudgetOrderBoundedUnderChurn(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{Seed: 1, MaxBlocks: 64})
	for range 10_000 {
		ix.Apply("a", batch(stored(0, 1, 100), removed("GPU", 100)))
	}
	ix.Apply("a", batch(stored(0, 2, 100)))
	s := ix.streams[streamID{"a", 0}]
	if got := len(s.order) - s.head; got > 2*1024+1 || cap(s.order) > 8*1024 {
		t.Errorf("order keeps %d hashes (capacity %d)", got, cap(s.order))
	}
	if m := ix.Match(prompt, []string{"a"}); m[0].Matched != 2*bs || budgetDropped(ix) != 0 {
		t.Errorf("%+v, %v dropped", m, budgetDropped(ix))
	}
}

// TestBudgetUnbounded: a negative budget keeps every block and no order.
func TestBudgetUnbounded(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{Seed: 1, MaxBlocks: -1})
	ix.Apply("a", batch(flood(3000, 10)...))
	s := ix.streams[streamID{"a", 0}]
	if ix.Blocks() != 3000 || s.order != nil {
		t.Errorf("%d blocks, order of %d", ix.Blocks(), len(s.order))
	}
}

// TestBudgetImport: a stream imported from a replica with more blocks than the budget
// is cut to it.
func TestBudgetImport(t *testing.T) {
	src, _ := NewIndex(IndexConfig{Seed: 1, MaxBlocks: -1})
	src.Apply("a", batch(flood(100, 10)...))
	st, err := src.ExportStream("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := NewIndex(IndexConfig{Seed: 1, MaxBlocks: 10})
	if err := dst.ImportStream("a", 0, st); err != nil {
		t.Fatal(err)
	}
	if dst.Blocks() != 10 || budgetDropped(dst) != 90 || dst.held[GPU].Len() != 10 {
		t.Errorf("%d blocks, %d in the GPU table, %v dropped", dst.Blocks(), dst.held[GPU].Len(), budgetDropped(dst))
	}
}
