package kvindex

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// history is a random stream of batches over endpoints a, b, c with 3 ranks each:
// stores of prompts sharing prefixes (the base model's and an adapter's, in GPU or CPU),
// tier updates and removals by a secondary tier (ownership), removals, clears.
type history struct {
	rng     *rand.Rand
	prompts [][]uint32
	seq     map[streamID]int64
}

const histBS = 16

func newHistory(seed uint64) *history {
	h := &history{rng: rand.New(rand.NewPCG(seed, 2)), seq: map[streamID]int64{}}
	base := seq32(12*histBS, 5000)
	for i := range 8 {
		n := h.rng.IntN(8) * histBS
		p := append([]uint32(nil), base[:n]...)
		h.prompts = append(h.prompts, append(p, seq32((1+h.rng.IntN(6))*histBS, uint32(20000+1000*i))...))
	}
	return h
}

var histKeys = []Key{{}, {Adapter: "sql"}}

// next returns the next batch and its endpoint.
func (h *history) next() (string, Batch) {
	ep, rank := []string{"a", "b", "c"}[h.rng.IntN(3)], h.rng.IntN(3)
	k := histKeys[h.rng.IntN(len(histKeys))]
	p := h.prompts[h.rng.IntN(len(h.prompts))]
	n := 1 + h.rng.IntN(len(p)/histBS)
	hashes := make([]uint64, n)
	for j := range hashes {
		hashes[j] = prefixHash(p[:(j+1)*histBS]) ^ uint64(len(k.Adapter))<<60
	}
	var ev Event
	switch r := h.rng.IntN(20); {
	case r < 11:
		ev = Event{Kind: BlockStored, BlockSize: histBS, Tokens: p[:n*histBS], Hashes: hashes, Medium: []string{"GPU", "CPU"}[h.rng.IntN(2)], LoRAName: k.Adapter}
	case r < 14: // a secondary tier's copy of blocks already held
		ev = Event{Kind: BlockStored, Hashes: hashes, Medium: "CPU", Ownership: "lmcache"}
	case r < 15:
		ev = Event{Kind: BlockRemoved, Hashes: hashes[h.rng.IntN(n):], Medium: "CPU", Ownership: "lmcache"}
	case r < 19:
		ev = Event{Kind: BlockRemoved, Hashes: hashes[h.rng.IntN(n):], Medium: []string{"GPU", "CPU"}[h.rng.IntN(2)]}
	default:
		ev = Event{Kind: AllBlocksCleared}
	}
	id := streamID{ep, rank}
	s := h.seq[id]
	h.seq[id] = s + 1
	return ep, Batch{DPRank: rank, Seq: s, Events: []Event{ev}}
}

// matches looks up every prompt under every key in ix.
func matches(ix *Index, prompts [][]uint32) [][]Match {
	var out [][]Match
	for _, k := range histKeys {
		for _, p := range prompts {
			out = append(out, ix.MatchKey(p, k, []string{"a", "b", "c"}))
		}
	}
	return out
}

// TestImportedStreamsAnswerAsTheExporter: streams exported from one index at a point of a
// random history (through their encoding) and imported into an empty one make it answer
// every lookup as the exporter, then and after both apply the rest of the history
// (removals and chain continuations find the imported blocks; secondary tiers' holders
// carry over).
func TestImportedStreamsAnswerAsTheExporter(t *testing.T) {
	for seed := range uint64(3) {
		h := newHistory(seed)
		src, _ := NewIndex(IndexConfig{Seed: 11, ExtraKeys: true})
		for range 300 {
			src.Apply(h.next())
		}
		dst, _ := NewIndex(IndexConfig{ExtraKeys: true}) // a key space of its own until it adopts
		imported := 0
		for id, last := range h.seq {
			st, err := src.ExportStream(id.endpoint, id.rank)
			if errors.Is(err, ErrNoStream) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.Seq != last-1 {
				t.Errorf("stream %v exported at batch %d, want %d (its last)", id, st.Seq, last-1)
			}
			back, err := DecodeStreamState(AppendStreamState(nil, st))
			if err != nil {
				t.Fatalf("decode an encoded state: %v", err)
			}
			if err := dst.ImportStream(id.endpoint, id.rank, back); err != nil {
				t.Fatalf("import %v: %v", id, err)
			}
			imported++
		}
		if imported < 5 || src.Blocks() == 0 {
			t.Fatalf("seed %d: only %d streams, %d blocks to import", seed, imported, src.Blocks())
		}
		if got, want := dst.Blocks(), src.Blocks(); got != want {
			t.Errorf("seed %d: %d blocks imported, the exporter holds %d", seed, got, want)
		}
		if diff := cmp.Diff(matches(src, h.prompts), matches(dst, h.prompts)); diff != "" {
			t.Fatalf("seed %d: after the import (-exporter +importer):\n%s", seed, diff)
		}
		for step := range 300 {
			ep, b := h.next()
			src.Apply(ep, b)
			dst.Apply(ep, b)
			if diff := cmp.Diff(matches(src, h.prompts), matches(dst, h.prompts)); diff != "" {
				t.Fatalf("seed %d, %d batches after the import (-exporter +importer):\n%s", seed, step+1, diff)
			}
		}
	}
}

// TestImportStreamRefuses: a state the index cannot take as its own is refused with the
// reason, and the stream is left empty (the caller replays instead).
func TestImportStreamRefuses(t *testing.T) {
	src, _ := NewIndex(IndexConfig{Seed: 11})
	src.Apply("a", Batch{Seq: 4, Events: []Event{stored(0, 3, 100)}})
	good, err := src.ExportStream("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cfg    IndexConfig
		before bool // the importer already has a stream of its own
		change func(*StreamState)
	}{
		{"another key space, after a stream of its own", IndexConfig{Seed: 12}, true, func(*StreamState) {}},
		{"another remote policy", IndexConfig{Seed: 11, Remote: RemoteCredit}, false, func(*StreamState) {}},
		{"other extra keys", IndexConfig{Seed: 11, ExtraKeys: true}, false, func(*StreamState) {}},
		{"no block size", IndexConfig{Seed: 11}, false, func(s *StreamState) { s.BlockSize = 0 }},
		{"holders of a tier not held", IndexConfig{Seed: 11}, false, func(s *StreamState) { s.Owners = []string{"x"}; s.Blocks[0].Holders[CPU] = 1 }},
		{"holders past the owners", IndexConfig{Seed: 11}, false, func(s *StreamState) { s.Owners = []string{"x"}; s.Blocks[0].Holders[GPU] = 4 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst, _ := NewIndex(tc.cfg)
			if tc.before {
				dst.Apply("b", batch(stored(0, 2, 100)))
			}
			dst.Apply("a", batch(stored(0, 1, 500))) // replaced or dropped by the import
			st := good
			st.Blocks = append([]BlockState(nil), good.Blocks...)
			tc.change(&st)
			if err := dst.ImportStream("a", 0, st); err == nil {
				t.Fatal("imported")
			}
			if m := dst.Match(prompt, []string{"a"})[0]; m.Matched != 0 {
				t.Errorf("after a refused import the stream holds %d tokens", m.Matched)
			}
		})
	}
	if _, err := src.ExportStream("a", 1); !errors.Is(err, ErrNoStream) {
		t.Errorf("export of a rank never seen: %v, want ErrNoStream", err)
	}
	dst, _ := NewIndex(IndexConfig{Seed: 11})
	if err := dst.ImportStream("a", 0, good); err != nil {
		t.Fatal(err)
	}
	if m := dst.Match(prompt, []string{"a"})[0]; m.Matched != 3*bs {
		t.Errorf("the unchanged state: %d tokens, want %d", m.Matched, 3*bs)
	}
}

func FuzzDecodeStreamState(f *testing.F) {
	h := newHistory(9)
	ix, _ := NewIndex(IndexConfig{Seed: 11, ExtraKeys: true})
	for range 60 {
		ix.Apply(h.next())
	}
	for id := range h.seq {
		if st, err := ix.ExportStream(id.endpoint, id.rank); err == nil {
			f.Add(AppendStreamState(nil, st))
		}
	}
	f.Add([]byte(stateMagic))
	f.Add([]byte("KVS1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10\x00\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, p []byte) {
		st, err := DecodeStreamState(p)
		if err != nil {
			return
		}
		back, err := DecodeStreamState(AppendStreamState(nil, st))
		if err != nil {
			t.Fatalf("re-encoded state refused: %v", err)
		}
		if diff := cmp.Diff(st, back); diff != "" {
			t.Fatalf("re-encoded state differs:\n%s", diff)
		}
		dst, _ := NewIndex(IndexConfig{Seed: st.KeySpace | 1, Remote: st.Remote, ExtraKeys: st.ExtraKeys})
		_ = dst.ImportStream("a", 0, st) // refused or taken, never a crash
	})
}

// TestExportDuringIngestionIsABatchBoundary: streams exported while a writer applies
// batches to them hold exactly the batches up to their Seq: imported, each answers as an
// index that applied those batches alone.
func TestExportDuringIngestionIsABatchBoundary(t *testing.T) {
	h := newHistory(5)
	var batches []Batch
	var want [][][]Match // after batch i
	ref, _ := NewIndex(IndexConfig{Seed: 11, ExtraKeys: true})
	for i := range 400 {
		b := Batch{Seq: int64(i)} // one stream, three events a batch
		for range 3 {
			_, n := h.next()
			b.Events = append(b.Events, n.Events...)
		}
		batches = append(batches, b)
		ref.Apply("a", b)
		want = append(want, matches(ref, h.prompts))
	}
	src, _ := NewIndex(IndexConfig{Seed: 11, ExtraKeys: true})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, b := range batches {
			src.Apply("a", b)
		}
	}()
	exports := 0
	for finished := false; !finished; exports++ {
		select {
		case <-done:
			finished = true
		default:
		}
		st, err := src.ExportStream("a", 0)
		if errors.Is(err, ErrNoStream) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		dst, _ := NewIndex(IndexConfig{ExtraKeys: true})
		if err := dst.ImportStream("a", 0, st); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want[st.Seq], matches(dst, h.prompts)); diff != "" {
			t.Fatalf("export %d at batch %d (-the batches up to it +the export):\n%s", exports, st.Seq, diff)
		}
	}
	t.Logf("%d exports during %d batches", exports, len(batches))
}
