package kvindex

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const bs = 4

// prompt is 6 blocks of distinct tokens.
var prompt = seq32(6*bs, 1000)

// stored is a BlockStored of prompt's blocks [from, to) with engine hashes base+i, chained
// on the block before from.
func stored(from, to int, base uint64) Event {
	ev := Event{Kind: BlockStored, BlockSize: bs, Tokens: prompt[from*bs : to*bs], Medium: "GPU"}
	for i := from; i < to; i++ {
		ev.Hashes = append(ev.Hashes, base+uint64(i))
	}
	if from > 0 {
		ev.Parent, ev.HasParent = base+uint64(from-1), true
	}
	return ev
}

func removed(medium string, hashes ...uint64) Event {
	return Event{Kind: BlockRemoved, Hashes: hashes, Medium: medium}
}

func batch(evs ...Event) Batch { return Batch{DPRank: 0, Events: evs} }

func with(ev Event, f func(*Event)) Event { f(&ev); return ev }

func TestIndexMatch(t *testing.T) {
	eps := []string{"a", "b"}
	tests := []struct {
		name    string
		credits Credits
		apply   map[string][]Event
		want    []Match
	}{
		{"nothing stored", Credits{}, nil, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"a whole prefix in one event", Credits{}, map[string][]Event{"a": {stored(0, 3, 100)}}, []Match{{3 * bs, 0, 0}, {0, -1, -1}}},
		{"a chain over two events", Credits{}, map[string][]Event{"a": {stored(0, 2, 100), stored(2, 5, 100)}}, []Match{{5 * bs, 0, 0}, {0, -1, -1}}},
		{"the holder that stored first ranks first", Credits{}, map[string][]Event{"b": {stored(0, 1, 1)}, "a": {stored(0, 2, 7)}}, []Match{{2 * bs, 1, 0}, {bs, 0, 0}}},
		{"a removed middle block ends the prefix", Credits{}, map[string][]Event{"a": {stored(0, 4, 100), removed("GPU", 102)}}, []Match{{2 * bs, 0, 0}, {0, -1, -1}}},
		{"removing the first block leaves nothing", Credits{}, map[string][]Event{"a": {stored(0, 4, 100), removed("", 100)}}, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"removal of another endpoint's hash is not applied", Credits{}, map[string][]Event{"a": {stored(0, 2, 100)}, "b": {removed("GPU", 100)}}, []Match{{2 * bs, 0, 0}, {0, -1, -1}}},
		{"all blocks cleared", Credits{}, map[string][]Event{"a": {stored(0, 3, 100), {Kind: AllBlocksCleared}}}, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"a block with an unknown parent is refused", Credits{}, map[string][]Event{"a": {stored(2, 4, 100)}}, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"LoRA blocks are refused", Credits{}, map[string][]Event{"a": {with(stored(0, 2, 100), func(e *Event) { e.LoRAName = "sql" })}}, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"salted blocks are refused", Credits{}, map[string][]Event{"a": {with(stored(0, 2, 100), func(e *Event) { e.ExtraKeys = true })}}, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"a second HMA group is refused", Credits{}, map[string][]Event{"a": {with(stored(0, 2, 100), func(e *Event) { e.Group = 1 })}}, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"sliding-window blocks are refused", Credits{}, map[string][]Event{"a": {with(stored(0, 2, 100), func(e *Event) { e.SpecKind = "sliding_window" })}}, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"full-attention spec kind is indexed", Credits{}, map[string][]Event{"a": {with(stored(0, 2, 100), func(e *Event) { e.SpecKind = "full_attention" })}}, []Match{{2 * bs, 0, 0}, {0, -1, -1}}},
		{"tokens not blocks x size are refused", Credits{}, map[string][]Event{"a": {with(stored(0, 2, 100), func(e *Event) { e.Tokens = e.Tokens[:5] })}}, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"an unknown medium is refused", Credits{}, map[string][]Event{"a": {with(stored(0, 2, 100), func(e *Event) { e.Medium = "NVME-OF" })}}, []Match{{0, -1, -1}, {0, -1, -1}}},
		{"CPU blocks at half credit", Credits{GPU: 1, CPU: 0.5}, map[string][]Event{"a": {with(stored(0, 2, 100), func(e *Event) { e.Medium = "CPU" })}}, []Match{{bs, 0, 0}, {0, -1, -1}}},
		{"a credit that is not a multiple of 2^-10, added block by block", Credits{GPU: 1, CPU: 0.3}, map[string][]Event{"a": {with(stored(0, 3, 100), func(e *Event) { e.Medium = "CPU" })}}, []Match{{4, 0, 0}, {0, -1, -1}}}, // 3 blocks x 4 x 0.3 = 3.6
		{"a zero-credit tier ends the prefix", Credits{GPU: 1}, map[string][]Event{"a": {stored(0, 1, 100), with(stored(1, 3, 100), func(e *Event) { e.Medium = "CPU" })}}, []Match{{bs, 0, 0}, {0, -1, -1}}},
		{"the best tier counts", Credits{GPU: 1, CPU: 0.5}, map[string][]Event{"a": {with(stored(0, 2, 100), func(e *Event) { e.Medium = "CPU" }), {Kind: BlockStored, Hashes: []uint64{100, 101}, Medium: "GPU"}}}, []Match{{2 * bs, 0, 0}, {0, -1, -1}}},
		{"GPU eviction keeps the CPU copy", Credits{GPU: 1, CPU: 0.5}, map[string][]Event{"a": {stored(0, 2, 100), {Kind: BlockStored, Hashes: []uint64{100, 101}, Medium: "CPU"}, removed("GPU", 100, 101)}}, []Match{{bs, 0, 0}, {0, -1, -1}}},
		{"a tokenless update of an unknown block is refused", Credits{}, map[string][]Event{"a": {{Kind: BlockStored, Hashes: []uint64{100}, Medium: "CPU"}}}, []Match{{0, -1, -1}, {0, -1, -1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := NewIndex(IndexConfig{Credits: tc.credits, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, ep := range []string{"b", "a"} { // b first: holder ranks follow store order
				for _, ev := range tc.apply[ep] {
					ix.Apply(ep, batch(ev))
				}
			}
			if diff := cmp.Diff(tc.want, ix.Match(prompt, eps)); diff != "" {
				t.Errorf("Match (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIndexKeysOnContent: two engines with different hash functions (different engine
// hashes for the same tokens) match the same prompt; other tokens do not.
func TestIndexKeysOnContent(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{})
	ix.Apply("a", batch(stored(0, 3, 100)))
	ix.Apply("b", batch(stored(0, 3, 9000)))
	other := append([]uint32{7}, prompt[1:]...)
	if got := ix.Match(prompt, []string{"a", "b"}); got[0].Matched != 3*bs || got[1].Matched != 3*bs {
		t.Errorf("same tokens: %+v, want %d each", got, 3*bs)
	}
	if got := ix.Match(other, []string{"a", "b"}); got[0].Matched != 0 || got[1].Matched != 0 {
		t.Errorf("first token differs: %+v, want nothing matched", got)
	}
	if got := ix.Match(prompt[:2*bs+1], []string{"a"}); got[0].Matched != 2*bs {
		t.Errorf("prompt of 2 full blocks and a partial one: %+v, want %d", got, 2*bs)
	}
}

// TestIndexRanksAndDrop: ranks of one endpoint count separately, the best rank wins, and
// Drop forgets every rank.
func TestIndexRanksAndDrop(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{})
	ix.Apply("a", Batch{DPRank: 0, Events: []Event{stored(0, 2, 100)}})
	ix.Apply("a", Batch{DPRank: 1, Events: []Event{stored(0, 4, 100)}})
	ix.Apply("a", Batch{DPRank: 0, Events: []Event{removed("GPU", 100)}}) // rank 0's block only
	if got := ix.Match(prompt, []string{"a"}); got[0].Matched != 4*bs {
		t.Errorf("after rank 0 lost block 0: %+v, want rank 1's %d", got, 4*bs)
	}
	ix.Drop("a", "left")
	if got := ix.Match(prompt, []string{"a"}); got[0].Matched != 0 || ix.Blocks() != 0 {
		t.Errorf("after Drop: %+v, %d blocks held", got, ix.Blocks())
	}
}

func TestIndexMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	ix, err := NewIndex(IndexConfig{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ix.Apply("a", batch(stored(0, 3, 100), removed("GPU", 102, 555), with(stored(0, 2, 1), func(e *Event) { e.LoRAName = "x" })))
	for outcome, want := range map[string]float64{OutStored: 3, OutRemoved: 1, OutRemovedUnknown: 1, OutLoRA: 2} {
		if got := testutil.ToFloat64(ix.m.blocks.WithLabelValues(outcome)); got != want {
			t.Errorf("blocks_total{outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "loadaware_kvevents_index_blocks"); err != nil || n != 1 {
		t.Errorf("index_blocks gauge: %d series, %v", n, err)
	}
	if ix.Blocks() != 2 {
		t.Errorf("Blocks = %d, want 2", ix.Blocks())
	}
}

func TestParseCredits(t *testing.T) {
	tests := []struct {
		in   string
		want Credits
		bad  bool
	}{
		{"", DefaultCredits(), false},
		{"CPU=0.25", Credits{GPU: 1, CPU: 0.25, Disk: 0.5, Storage: 0.5}, false},
		{"gpu=1, cpu=0, disk=0, storage=0", Credits{GPU: 1}, false},
		{"GPU=1,CPU=0.9,STORAGE=0.25", Credits{GPU: 1, CPU: 0.9, Disk: 0.5, Storage: 0.25}, false},
		{"FS=0.25", Credits{GPU: 1, CPU: 1, Disk: 0.5, Storage: 0.25}, false},
		{"CPU_TIER2=0.3,NVME=0.3", Credits{GPU: 1, CPU: 1, Disk: 0.3, Storage: 0.5}, false},
		{"CPU_PINNED=0.8", Credits{GPU: 1, CPU: 0.8, Disk: 0.5, Storage: 0.5}, false},
		{"STORAGE=0.5,OBJ=0.25", Credits{}, true}, // one tier, two credits
		{"CPU=2", Credits{}, true},
		{"TAPE=1", Credits{}, true},
		{"=1", Credits{}, true},
		{"CPU", Credits{}, true},
	}
	for _, tc := range tests {
		got, err := ParseCredits(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("ParseCredits(%q) = %+v, %v", tc.in, got, err)
		}
		if tc.bad {
			continue
		}
		if back, err := ParseCredits(got.String()); err != nil || back != got {
			t.Errorf("ParseCredits(%q) = %v, %v: String does not read back", got.String(), back, err)
		}
	}
}

// TestIndexManyStreams: more streams than one slot word holds, some dropped and their
// slots reused; every endpoint's match stays its own.
func TestIndexManyStreams(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{Seed: 3})
	var eps []string
	for i := 0; i < 150; i++ {
		eps = append(eps, "10.1.0."+strconv.Itoa(i)+":8000")
	}
	held := func(i int) int { return 1 + i%6 } // blocks of prompt endpoint i holds
	for i, ep := range eps {
		ix.Apply(ep, batch(stored(0, held(i), uint64(i)*100)))
	}
	for i := 0; i < 150; i += 3 {
		ix.Drop(eps[i], "left")
	}
	for i := 0; i < 150; i += 6 { // back, on reused slots, holding one block
		ix.Apply(eps[i], batch(stored(0, 1, 77)))
	}
	got := ix.Match(prompt, eps)
	for i := range eps {
		want := held(i) * bs
		switch {
		case i%6 == 0:
			want = bs
		case i%3 == 0:
			want = 0
		}
		if got[i].Matched != want {
			t.Errorf("endpoint %d: matched %d, want %d", i, got[i].Matched, want)
		}
	}
	if ix.Blocks() == 0 || got[1].HolderRank < 0 || got[3].HolderRank != -1 {
		t.Errorf("blocks %d, holder ranks %d %d", ix.Blocks(), got[1].HolderRank, got[3].HolderRank)
	}
}

// TestMatchRepeatedLists: lookups that ask about the same list again (its grouping is
// then reused) answer as a first lookup would, when the list is changed in place, when
// another list of the same length is asked, and when streams come and go between them.
func TestMatchRepeatedLists(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{Seed: 2})
	ix.Apply("a", batch(stored(0, 3, 100)))
	ix.Apply("b", batch(stored(0, 1, 200)))
	eps := []string{"a", "b"}
	check := func(step string, want []Match) {
		t.Helper()
		for range 3 { // the second and third ask reuse the grouping
			if diff := cmp.Diff(want, ix.Match(prompt, eps)); diff != "" {
				t.Fatalf("%s: Match (-want +got):\n%s", step, diff)
			}
		}
	}
	check("a and b", []Match{{3 * bs, 0, 0}, {bs, 1, 0}})
	eps[0], eps[1] = eps[1], eps[0] // the same slice, changed in place
	check("b and a", []Match{{bs, 1, 0}, {3 * bs, 0, 0}})
	eps = []string{"b", "c"}
	check("b and c", []Match{{bs, 0, 0}, {0, -1, -1}})
	ix.Apply("c", batch(stored(0, 2, 300))) // a new stream: a new directory
	check("c stored", []Match{{bs, 0, 0}, {2 * bs, 1, 0}})
	ix.Drop("b", "left")
	check("b dropped", []Match{{0, -1, -1}, {2 * bs, 0, 0}})
	ix.Apply("b", batch(stored(0, 4, 400))) // back, on the slot a or c did not take
	check("b back", []Match{{4 * bs, 1, 0}, {2 * bs, 0, 0}})
}

// TestAppendMatch: AppendMatch leaves what dst held and appends what Match answers, also
// into a reused dst.
func TestAppendMatch(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{Seed: 4})
	ix.Apply("a", batch(stored(0, 3, 100)))
	ix.Apply("b", batch(stored(0, 2, 200)))
	eps := []string{"b", "a", "c"}
	want := ix.Match(prompt, eps)
	got := ix.AppendMatch([]Match{{7, 3, 0}}, prompt, eps)
	if diff := cmp.Diff(append([]Match{{7, 3, 0}}, want...), got); diff != "" {
		t.Errorf("appended to one entry (-want +got):\n%s", diff)
	}
	for range 2 {
		if got = ix.AppendMatch(got[:0], prompt, eps); !cmp.Equal(got, want) {
			t.Errorf("into a reused dst: %+v, want %+v", got, want)
		}
	}
	if got := ix.Match(prompt, nil); got == nil || len(got) != 0 {
		t.Errorf("Match of no endpoints: %#v, want an empty result", got)
	}
}

// seq32 returns the n tokens from, from+1, ...
func seq32(n int, from uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}
