package lmcache

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A list passed again is not resolved again, yet every registry change since shows: the
// resolution maps IPs to places, and credit is read from the registry at each lookup.
func TestMatchHeldFollowsTheRegistryThroughOneList(t *testing.T) {
	p := prompt(2, 600)
	ix := newTestIndex(t, IndexConfig{})
	endpoints := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}
	steps := []struct {
		name string
		msgs []Message
		want []HeldMatch
	}{
		{"nobody holds the prompt", []Message{regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.2")}, nil},
		{"two holders, in admission order", cat(admits(t, "b", 0, "cpu", p, 0, 3), admits(t, "a", 0, "cpu", p, 0, 2)),
			[]HeldMatch{{1, EndpointMatch{600, 0}}, {0, EndpointMatch{512, 1}}}},
		{"a restart drops the restarted worker's chunks", []Message{regMsg("b", 0, "10.0.0.2")},
			[]HeldMatch{{0, EndpointMatch{512, 0}}}},
		{"a newer instance on a's IP supersedes it", []Message{regMsg("a2", 0, "10.0.0.1")}, nil},
		{"the newer instance's own chunks are credited", admits(t, "a2", 0, "cpu", p, 0, 1),
			[]HeldMatch{{0, EndpointMatch{256, 0}}}},
		{"a third instance on a fresh IP", cat(regMsg("c", 0, "10.0.0.3"), admits(t, "c", 0, "disk", p, 0, 3)),
			[]HeldMatch{{0, EndpointMatch{256, 0}}, {2, EndpointMatch{600, 1}}}},
		{"deregistering takes its credit away", []Message{DeRegisterMsg{InstanceID: "a2"}},
			[]HeldMatch{{2, EndpointMatch{600, 0}}}},
	}
	for _, s := range steps {
		applyAll(t, ix, s.msgs, t0)
		if d := cmp.Diff(s.want, ix.MatchHeld(nil, p, endpoints)); d != "" {
			t.Fatalf("%s: MatchHeld mismatch (-want +got):\n%s", s.name, d)
		}
	}
	// A different list (other contents, other array) is resolved anew.
	if got := ix.MatchHeld(nil, p, []string{"10.0.0.3:8000"}); !cmp.Equal(got, []HeldMatch{{0, EndpointMatch{600, 0}}}) {
		t.Fatalf("new list: %+v", got)
	}
}

// The walk credits exactly what a direct count over every holder would, whatever the
// number of holders and however their chunks are spread, with instances holding keys in
// several locations counted once.
func TestLookupAgreesWithADirectCount(t *testing.T) {
	for _, n := range []int{1, 3, 40, 300} {
		t.Run(fmt.Sprintf("instances=%d", n), func(t *testing.T) {
			p := prompt(3, 1578)
			keys := newTestIndex(t, IndexConfig{}).ChunkKeys(p)
			ix := newTestIndex(t, IndexConfig{})
			want := []Match(nil)
			for i := range n {
				id, ip := fmt.Sprintf("i%d", i), fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
				applyAll(t, ix, []Message{regMsg(id, 0, ip)}, t0)
				// Instance i holds chunks [0, i%8), skipping chunk 3 when i%5 == 0, in two
				// locations when i is even.
				held := 0
				for c := range i % 8 {
					if c == 3 && i%5 == 0 {
						continue
					}
					if c == held {
						held++
					}
					for _, loc := range []string{"cpu", "disk"}[:1+(1-i%2)] {
						applyAll(t, ix, []Message{KVAdmitMsg{InstanceID: id, Key: keys[c], Location: loc}}, t0)
					}
				}
				if held > 0 {
					want = append(want, Match{InstanceID: id, IP: ip, Tokens: min(held*256, len(p)), HolderRank: len(want)})
				}
			}
			slices.SortStableFunc(want, func(a, b Match) int { return b.Tokens - a.Tokens })
			if d := cmp.Diff(want, ix.LookupKeys(keys, len(p))); d != "" {
				t.Fatalf("LookupKeys mismatch (-want +got):\n%s", d)
			}
		})
	}
}

// MatchHeldIn over a subset of a list, and MatchHeldExcept over the rest of the list,
// answer exactly as MatchHeld over that subset as a list of its own, for every subset:
// places in the subset, and IPs shared only when two of the subset's endpoints have them.
func TestMatchHeldInAgreesWithTheSubsetsOwnList(t *testing.T) {
	p := prompt(4, 600)
	ix := newTestIndex(t, IndexConfig{})
	applyAll(t, ix, cat(
		regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 3),
		regMsg("b", 0, "10.0.0.2"), admits(t, "b", 0, "cpu", p, 0, 1),
		regMsg("c", 0, "10.0.0.3"), admits(t, "c", 0, "cpu", p, 0, 2),
		regMsg("d", 0, "10.0.0.4"), admits(t, "d", 0, "cpu", p, 0, 3),
	), t0)
	all := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.3:8001", "10.0.0.4:8000", "engine-0:8000", "10.0.0.9:8000"}
	for mask := range 1 << len(all) {
		subset := []int32{} // not nil: nil means all
		var list []string
		for i := range all {
			if mask&(1<<i) != 0 {
				subset = append(subset, int32(i))
				list = append(list, all[i])
			}
		}
		want := ix.MatchHeld(nil, p, list)
		if got := ix.MatchHeldIn(nil, p, all, subset); !cmp.Equal(got, want) {
			t.Fatalf("subset %v: MatchHeldIn %+v, MatchHeld of the list %+v", list, got, want)
		}
		var except []int32 // the places not in subset
		for i := range all {
			if mask&(1<<i) == 0 {
				except = append(except, int32(i))
			}
		}
		if got := ix.MatchHeldExcept(nil, p, all, except); !cmp.Equal(got, want) {
			t.Fatalf("all but %v: MatchHeldExcept %+v, MatchHeld of the list %+v", except, got, want)
		}
	}
	if got, want := ix.MatchHeldIn(nil, p, all, nil), ix.MatchHeld(nil, p, slices.Clone(all)); !cmp.Equal(got, want) {
		t.Fatalf("nil subset: %+v, want %+v", got, want)
	}
}
