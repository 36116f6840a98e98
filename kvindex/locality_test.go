package kvindex

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestIndexMediaAndLocality: every medium spelling lands in its tier's credit, unknown
// ones and unknown localities are refused and counted, and REMOTE blocks follow the
// policy (a REMOTE GPU block never credited).
func TestIndexMediaAndLocality(t *testing.T) {
	credits := Credits{GPU: 1, CPU: 0.75, Disk: 0.5, Storage: 0.25}
	at := func(medium, locality string) Event {
		return with(stored(0, 4, 100), func(e *Event) { e.Medium, e.Locality = medium, locality })
	}
	tests := []struct {
		name    string
		remote  RemotePolicy
		evs     []Event
		matched int    // tokens credited to "a"
		refused string // the outcome counted for the refused blocks, if any
	}{
		{"GPU", RemoteRefuse, []Event{at("GPU", "")}, 4 * bs, ""},
		{"None is GPU", RemoteRefuse, []Event{at("", "")}, 4 * bs, ""},
		{"CPU_PINNED is CPU", RemoteRefuse, []Event{at("CPU_PINNED", "")}, 3 * bs, ""},
		{"CPU_TIER1 is CPU", RemoteRefuse, []Event{at("CPU_TIER1", "")}, 3 * bs, ""},
		{"CPU_TIER2 is disk", RemoteRefuse, []Event{at("CPU_TIER2", "")}, 2 * bs, ""},
		{"DISK", RemoteRefuse, []Event{at("DISK", "")}, 2 * bs, ""},
		{"STORAGE", RemoteRefuse, []Event{at("STORAGE", "LOCAL")}, bs, ""},
		{"FS (v0.26) is storage", RemoteRefuse, []Event{at("FS", "")}, bs, ""},
		{"OBJ (v0.26) is storage", RemoteRefuse, []Event{at("OBJ", "")}, bs, ""},
		{"SHARED_STORAGE", RemoteRefuse, []Event{at("SHARED_STORAGE", "")}, bs, ""},
		{"an unknown medium is refused", RemoteCredit, []Event{at("TAPE", "")}, 0, OutUnknownMedium},
		{"an unknown locality is refused", RemoteCredit, []Event{at("STORAGE", "NEARBY")}, 0, OutUnknownLocal},
		{"REMOTE storage refused", RemoteRefuse, []Event{at("STORAGE", "REMOTE")}, 0, OutRemote},
		{"REMOTE storage credited at its tier", RemoteCredit, []Event{at("STORAGE", "REMOTE")}, bs, ""},
		{"REMOTE CPU credited at CPU", RemoteCredit, []Event{at("CPU", "REMOTE")}, 3 * bs, ""},
		{"REMOTE GPU is never the publisher's GPU", RemoteCredit, []Event{at("GPU", "REMOTE")}, 0, OutRemote},
		{"a refused REMOTE removal leaves the local copy", RemoteRefuse, []Event{at("STORAGE", "LOCAL"),
			with(removed("STORAGE", 100), func(e *Event) { e.Locality = "REMOTE" })}, bs, OutRemote},
		{"a credited REMOTE removal removes it", RemoteCredit, []Event{at("STORAGE", "REMOTE"),
			with(removed("STORAGE", 102), func(e *Event) { e.Locality = "REMOTE" })}, bs / 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := NewIndex(IndexConfig{Credits: credits, Remote: tc.remote, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			ix.Apply("a", batch(tc.evs...))
			if got := ix.Match(prompt, []string{"a"})[0].Matched; got != tc.matched {
				t.Errorf("matched %d tokens, want %d", got, tc.matched)
			}
			if tc.refused != "" && testutil.ToFloat64(ix.m.blocks.WithLabelValues(tc.refused)) == 0 {
				t.Errorf("nothing counted as %s", tc.refused)
			}
		})
	}
}

// TestIndexExtraKeys: with ExtraKeys, an adapter's or a salt's blocks match only lookups
// under the same Key; without, they are refused as before. An adapter known only by
// lora_id is refused either way.
func TestIndexExtraKeys(t *testing.T) {
	lora := func(name, salt string) Event {
		return with(stored(0, 3, 100), func(e *Event) { e.LoRAName, e.Salt = name, salt })
	}
	tests := []struct {
		name   string
		extras bool
		ev     Event
		want   map[Key]int // tokens credited per lookup key
	}{
		{"base model", true, stored(0, 3, 100), map[Key]int{{}: 3 * bs, {Adapter: "sql"}: 0, {Salt: "s"}: 0}},
		{"an adapter's blocks", true, lora("sql", ""), map[Key]int{{}: 0, {Adapter: "sql"}: 3 * bs, {Adapter: "chat"}: 0, {Adapter: "sql", Salt: "s"}: 0}},
		{"a salt's blocks", true, lora("", "s"), map[Key]int{{}: 0, {Salt: "s"}: 3 * bs, {Salt: "t"}: 0, {Adapter: "s"}: 0}},
		{"an adapter and a salt", true, lora("sql", "s"), map[Key]int{{Adapter: "sql", Salt: "s"}: 3 * bs, {Adapter: "sql"}: 0, {Salt: "s"}: 0}},
		{"adapters refused without the flag", false, lora("sql", ""), map[Key]int{{}: 0, {Adapter: "sql"}: 0}},
		{"salts refused without the flag", false, lora("", "s"), map[Key]int{{}: 0, {Salt: "s"}: 0}},
		{"an adapter by id only is refused", true, with(stored(0, 3, 100), func(e *Event) { e.LoRAID = 2 }), map[Key]int{{}: 0}},
		{"opaque extra keys are refused", true, with(lora("sql", ""), func(e *Event) { e.ExtraKeys = true }), map[Key]int{{Adapter: "sql"}: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := NewIndex(IndexConfig{ExtraKeys: tc.extras, Seed: 9})
			if err != nil {
				t.Fatal(err)
			}
			ix.Apply("a", batch(tc.ev))
			// A continuation of the chain inherits the first block's key.
			next := stored(3, 5, 100)
			next.LoRAName, next.Salt = tc.ev.LoRAName, ""
			ix.Apply("a", batch(next))
			for k, want := range tc.want {
				if want > 0 {
					want += 2 * bs // the continuation
				}
				if got := ix.MatchKey(prompt, k, []string{"a"})[0].Matched; got != want {
					t.Errorf("MatchKey(%+v) matched %d tokens, want %d", k, got, want)
				}
			}
		})
	}
}

// TestMatchNamesTheRank: the rank holding the longest prefix is reported, the earlier
// store on a tie.
func TestMatchNamesTheRank(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{Seed: 2})
	ix.Apply("a", Batch{DPRank: 2, Events: []Event{stored(0, 2, 100)}})
	ix.Apply("a", Batch{DPRank: 5, Events: []Event{stored(0, 4, 100)}})
	ix.Apply("b", Batch{DPRank: 1, Events: []Event{stored(0, 3, 100)}})
	ix.Apply("b", Batch{DPRank: 0, Events: []Event{stored(0, 3, 100)}})
	want := []Match{{Matched: 4 * bs, HolderRank: 0, Rank: 5}, {Matched: 3 * bs, HolderRank: 1, Rank: 1}, {HolderRank: -1, Rank: -1}}
	if diff := cmp.Diff(want, ix.Match(prompt, []string{"a", "b", "c"})); diff != "" {
		t.Errorf("Match (-want +got):\n%s", diff)
	}
}

func FuzzParseCredits(f *testing.F) {
	for _, s := range []string{"", "GPU=1,CPU=0.9,STORAGE=0.5", "FS=0.25,OBJ=0.25", "cpu_tier2=0", "=1", "CPU", "GPU=NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCredits(s)
		if err != nil {
			return
		}
		for m := range numMedia {
			if v := c.of(m); !(v >= 0 && v <= 1) {
				t.Fatalf("ParseCredits(%q): %s credit %v", s, m, v)
			}
		}
		if back, err := ParseCredits(c.String()); err != nil || back != c {
			t.Fatalf("ParseCredits(%q) = %v: reads back as %v, %v", s, c, back, err)
		}
		if _, err := NewIndex(IndexConfig{Credits: c, Seed: 1}); err != nil {
			t.Fatalf("NewIndex refuses parsed credits %v: %v", c, err)
		}
	})
}

// TestIndexOwnership: copies of a block in one tier kept by different holders (the
// engine's own, secondary tiers named by ownership) are credited until the last holder
// removes its copy.
func TestIndexOwnership(t *testing.T) {
	cpu := func(owner string) Event { // a tokenless tier update of the prompt's first 3 blocks
		return Event{Kind: BlockStored, Hashes: []uint64{100, 101, 102}, Medium: "CPU", Ownership: owner}
	}
	drop := func(owner string, hashes ...uint64) Event {
		return with(removed("CPU", hashes...), func(e *Event) { e.Ownership = owner })
	}
	tests := []struct {
		name string
		evs  []Event
		want int // tokens credited on CPU alone (GPU copies removed)
	}{
		{"own copy removed: gone", []Event{cpu(""), drop("", 100)}, 0},
		{"own and a tier's copy, own removed: the tier's stays", []Event{cpu(""), cpu("fs"), drop("", 100)}, 3 * bs},
		{"own and a tier's copy, the tier's removed: own stays", []Event{cpu(""), cpu("fs"), drop("fs", 100, 101, 102)}, 3 * bs},
		{"two tiers, one removed: the other stays", []Event{cpu("fs"), cpu("obj"), drop("fs", 101)}, 3 * bs},
		{"two tiers, both removed: gone", []Event{cpu("fs"), cpu("obj"), drop("fs", 101), drop("obj", 101)}, bs},
		{"a tier's removal of a copy it never held leaves own", []Event{cpu(""), drop("obj", 100)}, 3 * bs},
		{"the tier's copy, then own's removal of a copy own never held", []Event{cpu("fs"), drop("", 100)}, 3 * bs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := NewIndex(IndexConfig{Credits: Credits{GPU: 1, CPU: 1}, Seed: 4})
			if err != nil {
				t.Fatal(err)
			}
			ix.Apply("a", batch(stored(0, 3, 100)))
			ix.Apply("a", batch(tc.evs...))
			ix.Apply("a", batch(removed("GPU", 100, 101, 102)))
			if got := ix.Match(prompt, []string{"a"})[0].Matched; got != tc.want {
				t.Errorf("matched %d tokens, want %d", got, tc.want)
			}
		})
	}
}

// TestIndexTooManyOwners: past 63 named owners, events of a new one are refused and
// counted; known owners still apply.
func TestIndexTooManyOwners(t *testing.T) {
	ix, _ := NewIndex(IndexConfig{Credits: Credits{GPU: 1, CPU: 1}, Seed: 4})
	ix.Apply("a", batch(stored(0, 1, 100)))
	for i := range maxOwners {
		ix.Apply("a", batch(Event{Kind: BlockStored, Hashes: []uint64{100}, Medium: "CPU", Ownership: strconv.Itoa(i)}))
	}
	if got := testutil.ToFloat64(ix.m.blocks.WithLabelValues(OutOwners)); got != 1 {
		t.Errorf("refused_too_many_owners = %v, want 1 (the 64th owner)", got)
	}
	ix.Apply("a", batch(removed("GPU", 100)))
	if got := ix.Match(prompt, []string{"a"})[0].Matched; got != bs {
		t.Errorf("matched %d tokens, want %d (63 owners' CPU copies)", got, bs)
	}
}
