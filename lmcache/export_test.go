package lmcache

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExportRebuildsTheIndex applies an export to an empty index, each group as frames
// from its peer (as a replica does), and compares every lookup with the original's.
func TestExportRebuildsTheIndex(t *testing.T) {
	a, b := prompt(1, 2048), prompt(2, 1024)
	tests := []struct {
		name string
		msgs []Message
	}{
		{"empty", nil},
		{"one instance", cat(regMsg("i1", 0, "10.0.0.1"), admits(t, "i1", 0, "cpu", a, 0, 8))},
		{"holder order kept: second instance stored first", cat(
			regMsg("i1", 0, "10.0.0.1"), hbMsg("i2", 0, "10.0.0.2"),
			admits(t, "i2", 0, "cpu", a, 0, 4), admits(t, "i1", 0, "cpu", a, 0, 8),
			admits(t, "i1", 0, "cpu", b, 0, 4), admits(t, "i2", 0, "cpu", b, 0, 2))},
		{"evicted keys stay out", cat(regMsg("i1", 0, "10.0.0.1"), admits(t, "i1", 0, "cpu", a, 0, 8), evicts(t, "i1", 0, "cpu", a, 2, 3))},
		{"superseded instance left out", cat(regMsg("old", 0, "10.0.0.1"), admits(t, "old", 0, "cpu", a, 0, 8),
			regMsg("new", 0, "10.0.0.1"), admits(t, "new", 0, "cpu", b, 0, 2))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := newTestIndex(t, IndexConfig{})
			for _, m := range tc.msgs {
				if err := src.Apply(m, t0); err != nil {
					t.Fatal(err)
				}
			}
			dst := newTestIndex(t, IndexConfig{})
			err := src.Export(func(peer string, msgs []Message) error {
				frames := make([][]byte, len(msgs))
				for i, m := range msgs {
					f, err := Encode(m)
					if err != nil {
						return err
					}
					frames[i] = f
				}
				if n := dst.ApplyFrames(frames, peer, t0); n != len(frames) {
					t.Errorf("peer %s: %d of %d frames applied", peer, n, len(frames))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range [][]uint32{a, b} {
				if diff := cmp.Diff(src.Lookup(p), dst.Lookup(p)); diff != "" {
					t.Errorf("lookup differs (-original +rebuilt):\n%s", diff)
				}
			}
			if src.Keys() != dst.Keys() {
				t.Errorf("keys: original %d, rebuilt %d", src.Keys(), dst.Keys())
			}
		})
	}
}
