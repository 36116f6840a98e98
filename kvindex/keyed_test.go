package kvindex

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestKeyedLookupsAgreeWithUnkeyed: the same history of batches (stores, removals and
// clears over three endpoints with three ranks each, in two tiers) applied once for the
// base model to one index, and once under an adapter (with a salt, or without) to
// another, interleaved there with other adapters' and the base model's blocks of the
// same tokens, gives the same Match for every prompt: MatchKey under the adapter on the
// second index equals Match on the first, and Match on the second sees only the base
// model's blocks, as an index fed only those. Both block sizes take their own key path
// (16 tokens: the unrolled chain).
func TestKeyedLookupsAgreeWithUnkeyed(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  Key
		bs   int
	}{
		{"adapter, 16-token blocks", Key{Adapter: "sql"}, 16},
		{"adapter, 4-token blocks", Key{Adapter: "sql"}, 4},
		{"adapter and salt", Key{Adapter: "sql", Salt: "tenant-7"}, 16},
		{"salt only", Key{Salt: "tenant-7"}, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.bs)))
			eps := []string{"a", "b", "c"}
			// Prompts share prefixes: prompt i is base[:n] followed by its own tail.
			base := seq32(12*tc.bs, 5000)
			prompts := make([][]uint32, 8)
			for i := range prompts {
				n := rng.IntN(8) * tc.bs
				p := append([]uint32(nil), base[:n]...)
				prompts[i] = append(p, seq32((1+rng.IntN(6))*tc.bs, uint32(20000+1000*i))...)
			}
			plain, _ := NewIndex(IndexConfig{Seed: 3})     // the key's history, unkeyed
			plainBase, _ := NewIndex(IndexConfig{Seed: 3}) // the base model's history
			keyed, _ := NewIndex(IndexConfig{Seed: 3, ExtraKeys: true})
			// Each history stores with its own engine hashes (vLLM's differ per adapter).
			stores := func(k Key, hashBase uint64) Batch {
				p := prompts[rng.IntN(len(prompts))]
				n := 1 + rng.IntN(len(p)/tc.bs)
				ev := Event{Kind: BlockStored, BlockSize: tc.bs, Tokens: p[:n*tc.bs], Medium: []string{"GPU", "CPU"}[rng.IntN(2)], LoRAName: k.Adapter, Salt: k.Salt}
				for j := range n {
					ev.Hashes = append(ev.Hashes, hashBase+prefixHash(p[:(j+1)*tc.bs]))
				}
				return Batch{DPRank: rng.IntN(3), Events: []Event{ev}}
			}
			for step := range 400 {
				ep := eps[rng.IntN(len(eps))]
				switch r := rng.IntN(10); {
				case r < 6:
					b := stores(tc.key, 1<<40)
					keyed.Apply(ep, b)
					b.Events[0].LoRAName, b.Events[0].Salt = "", ""
					plain.Apply(ep, b)
				case r < 8:
					// Another adapter's and the base model's blocks, into the keyed index.
					keyed.Apply(ep, stores(Key{Adapter: "chat"}, 2<<40))
					b := stores(Key{}, 3<<40)
					keyed.Apply(ep, b)
					plainBase.Apply(ep, b)
				case r < 9:
					b := stores(tc.key, 1<<40)
					ev := Event{Kind: BlockRemoved, Medium: b.Events[0].Medium, Hashes: b.Events[0].Hashes[rng.IntN(len(b.Events[0].Hashes)):]}
					for _, ix := range []*Index{keyed, plain} {
						ix.Apply(ep, Batch{DPRank: b.DPRank, Events: []Event{ev}})
					}
				default:
					if step%4 == 0 { // a rank's clear empties every key's blocks on it
						b := Batch{DPRank: rng.IntN(3), Events: []Event{{Kind: AllBlocksCleared}}}
						for _, ix := range []*Index{keyed, plain, plainBase} {
							ix.Apply(ep, b)
						}
					}
				}
				for i, p := range prompts {
					if diff := cmp.Diff(plain.Match(p, eps), keyed.MatchKey(p, tc.key, eps)); diff != "" {
						t.Fatalf("step %d, prompt %d: keyed lookup differs from unkeyed (-unkeyed +keyed):\n%s", step, i, diff)
					}
					if diff := cmp.Diff(plainBase.Match(p, eps), keyed.Match(p, eps)); diff != "" {
						t.Fatalf("step %d, prompt %d: base-model lookup sees keyed blocks (-base only +keyed index):\n%s", step, i, diff)
					}
				}
			}
			if plain.Blocks() == 0 || plainBase.Blocks() == 0 {
				t.Fatalf("the history left nothing to look up (%d, %d blocks)", plain.Blocks(), plainBase.Blocks())
			}
		})
	}
}

// prefixHash is an engine hash of a prefix: equal prefixes, equal hashes, as vLLM's.
func prefixHash(toks []uint32) uint64 {
	h := uint64(14695981039346656037)
	for _, t := range toks {
		h = (h ^ uint64(t)) * 1099511628211
	}
	return h >> 2
}
