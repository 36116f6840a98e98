package lmcache

import (
	"slices"
	"testing"
)

// TestKeyMemoAnswersOnlyForTheSamePrompt stores a prompt and asks for the keys of others:
// only tokens equal to the stored ones get the stored keys, appended to what dst holds.
func TestKeyMemoAnswersOnlyForTheSamePrompt(t *testing.T) {
	stored := prompt(1, 600)
	keys := []int64{11, 22, 33}
	changed := slices.Clone(stored)
	changed[599]++
	for _, tc := range []struct {
		name   string
		store  []uint32
		ask    []uint32
		wantOK bool
	}{
		{"the same prompt", stored, stored, true},
		{"an equal copy", stored, slices.Clone(stored), true},
		{"the last token differs", stored, changed, false},
		{"a prefix of it", stored, stored[:512], false},
		{"longer", stored, append(slices.Clone(stored), 7), false},
		{"nothing stored", nil, stored, false},
		{"an empty prompt", stored, nil, false},
		{"over the memo's bound", prompt(2, maxMemoTokens+1), prompt(2, maxMemoTokens+1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m keyMemo
			m.store(tc.store, keys)
			got, ok := m.appendKeys([]int64{5}, tc.ask)
			want := []int64{5}
			if tc.wantOK {
				want = append(want, keys...)
			}
			if ok != tc.wantOK || !slices.Equal(got, want) {
				t.Errorf("appendKeys = %v, %v; want %v, %v", got, ok, want, tc.wantOK)
			}
		})
	}
}

// TestKeyMemoKeepsACopy changes the caller's token slice after the store: the memo must
// not answer for the changed slice with the keys of what it held before.
func TestKeyMemoKeepsACopy(t *testing.T) {
	var m keyMemo
	buf := prompt(1, 600)
	m.store(buf, []int64{1})
	buf[0]++
	if got, ok := m.appendKeys(nil, buf); ok {
		t.Errorf("appendKeys after the caller changed its tokens = %v, true: the memo aliases the caller's slice", got)
	}
}

// TestRoutedGivesTheDetectorTheKeysOfWhatItRouted looks a prompt up and then routes either
// that prompt or another one in the same slice: the detector must get the keys of the
// prompt routed, which the engine then admits, so no endpoint is suspected.
func TestRoutedGivesTheDetectorTheKeysOfWhatItRouted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reuseSlot bool // the caller overwrites the looked-up slice with the routed prompt
	}{
		{"the prompt looked up", false},
		{"another prompt in the looked-up slice", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := NewMissDetector(MissConfig{MinAdmits: 2, MinPrompts: 1})
			if err != nil {
				t.Fatal(err)
			}
			ix := newTestIndex(t, IndexConfig{Detector: d})
			looked, routed := prompt(1, 600), prompt(2, 600)
			ix.MatchHeldIn(nil, looked, []string{"10.0.0.1:8000"}, nil)
			if tc.reuseSlot {
				copy(looked, routed)
			} else {
				routed = looked
			}
			ix.Routed("10.0.0.1:8000", looked)
			applyAll(t, ix, cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", routed, 0, 3)), t0)
			if got := d.Suspected(); len(got) != 0 {
				t.Errorf("Suspected = %v, want none: the detector got other keys than the routed prompt's", got)
			}
		})
	}
}

// BenchmarkRoutedAfterLookup is a decision's two uses of the prompt's chunk keys: the
// lookup (MatchHeldIn, 2 endpoints, nobody holding) and Routed with a MissDetector.
func BenchmarkRoutedAfterLookup(b *testing.B) {
	d, err := NewMissDetector(MissConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ix := newTestIndex(b, IndexConfig{Detector: d})
	toks, all := prompt(1, 1578), []string{"10.0.0.1:8000", "10.0.0.2:8000"}
	var held []HeldMatch
	b.ReportAllocs()
	for b.Loop() {
		held = ix.MatchHeldIn(held[:0], toks, all, nil)
		ix.Routed(all[0], toks)
	}
}
