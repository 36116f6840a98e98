package replica

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/prometheus/client_golang/prometheus"
)

// newIndexGate returns an empty index behind a gate that is not open yet.
func newIndexGate(t testing.TB) (*lmcache.Index, *Gate) {
	t.Helper()
	idx, err := lmcache.NewIndex(lmcache.IndexConfig{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGate(idx, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return idx, g
}

// newGate is newIndexGate's gate, opened (a lone picker's).
func newGate(t testing.TB) *Gate {
	t.Helper()
	_, g := newIndexGate(t)
	g.Open()
	return g
}

func feed(t testing.TB, g *Gate, peer string, msgs ...lmcache.Message) {
	t.Helper()
	n := &node{idx: g.idx, gate: g, fleet: fleet.New()}
	n.engineSays(t, peer, msgs...)
}

func TestStateFileRestoresTheIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	p1, p2 := tokens(1, 16), tokens(2, 16)
	src := newGate(t)
	feed(t, src, "10.0.0.1", register("e1", "10.0.0.1"))
	feed(t, src, "10.0.0.2", register("e2", "10.0.0.2"))
	feed(t, src, "10.0.0.1", admitsOf(t, "e1", p1)...)
	feed(t, src, "10.0.0.2", admitsOf(t, "e2", p2)...)
	if err := SaveState(path, src); err != nil {
		t.Fatal(err)
	}

	dst := newGate(t)
	if n, err := LoadState(path, dst); err != nil || n == 0 {
		t.Fatalf("LoadState = %d, %v", n, err)
	}
	for _, p := range [][]uint32{p1, p2} {
		if diff := cmp.Diff(src.idx.Lookup(p), dst.idx.Lookup(p)); diff != "" {
			t.Errorf("restored lookup differs (-saved +restored):\n%s", diff)
		}
	}
	// e1's engine restarted as another instance (its register went to nobody): its old
	// chunks go at its first message; e2 speaks as itself and keeps its chunks.
	feed(t, dst, "10.0.0.1", admitsOf(t, "e1-restarted", tokens(3, 4))...)
	feed(t, dst, "10.0.0.2", admitsOf(t, "e2", tokens(4, 4))...)
	if got := matched(dst.idx, p1); len(got) != 0 {
		t.Errorf("the restarted engine's old chunks are still credited: %v", got)
	}
	if got := matched(dst.idx, p2); got["10.0.0.2"] != len(p2) {
		t.Errorf("the unchanged engine lost its chunks: %v", got)
	}
	if got := matched(dst.idx, tokens(3, 4)); got["10.0.0.1"] != 4 {
		t.Errorf("the restarted engine's new instance is not credited: %v", got)
	}
	if v := counterValue(dst.met.discarded); v != 1 {
		t.Errorf("discarded instances: %v, want 1", v)
	}
}

func TestLoadStateRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	g := newGate(t)
	feed(t, g, "10.0.0.1", register("e1", "10.0.0.1"))
	if err := SaveState(good, g); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		content []byte
		want    string
	}{
		{"not a state file", []byte("hello"), "not a loadaware-epp state file"},
		{"truncated", whole[:len(whole)-3], "truncated"},
		{"trailing bytes", append(append([]byte{}, whole...), 1), "bytes after the end record"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(p, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadState(p, newGate(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--state-file") {
				t.Errorf("LoadState: %v, want an error naming --state-file and %q", err, tc.want)
			}
		})
	}
	if n, err := LoadState(filepath.Join(dir, "missing"), newGate(t)); n != 0 || err != nil {
		t.Errorf("a missing file: %d, %v; want 0, nil (a first start)", n, err)
	}
}
