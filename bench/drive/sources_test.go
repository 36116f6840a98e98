package drive

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/workload"
)

// A workload source's seed is the workload's own generated seed, cut to the limit.
func TestWorkloadSource(t *testing.T) {
	src, err := WorkloadSource("published", 7)
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Seed(3)
	if err != nil {
		t.Fatal(err)
	}
	f, err := workload.Resolve("published")
	if err != nil {
		t.Fatal(err)
	}
	f.Config.Requests = 7
	want, err := workload.Generate(f.Config, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || len(got) != 7 {
		t.Errorf("seed 3: %d requests, not the workload's own 7", len(got))
	}
	if src.Name != f.Name || src.Rate != f.Config.Rate {
		t.Errorf("source %q at %v req/s, want %q at %v", src.Name, src.Rate, f.Name, f.Config.Rate)
	}
	if _, err := WorkloadSource(filepath.Join(t.TempDir(), "none.json"), 0); err == nil {
		t.Error("a missing workload file was accepted")
	}
}

// Trace seeds are consecutive windows of the trace (in its own clock), each sent from its
// start and sped up; the rate is the trace's, sped up.
func TestTraceSourceWindows(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.jsonl")
	var b strings.Builder
	for i := range 6 {
		b.WriteString(`{"timestamp": ` + []string{"0", "1000", "2000", "3000", "4000", "5000"}[i] + `, "input_length": 500, "output_length": 4, "hash_ids": [` + []string{"1", "1", "2", "2", "3", "3"}[i] + `]}` + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := TraceSource(path, 2, 2*time.Second, 32768, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if src.Rate != 6.0/5*2 {
		t.Errorf("rate %v, want 6 records over 5 s, twice as fast", src.Rate)
	}
	for seed, want := range map[uint64]int{1: 2, 2: 2, 3: 2} {
		reqs, err := src.Seed(seed)
		if err != nil {
			t.Fatal(err)
		}
		if len(reqs) != want {
			t.Fatalf("seed %d: %d requests, want %d", seed, len(reqs), want)
		}
		if reqs[0].SendAt != 0 || reqs[1].SendAt != 500*time.Millisecond {
			t.Errorf("seed %d sends at %v and %v, want 0 and 500ms (its window's 1 s apart, twice as fast)", seed, reqs[0].SendAt, reqs[1].SendAt)
		}
	}
}
