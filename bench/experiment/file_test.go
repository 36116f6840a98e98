package experiment

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSavedResultsRoundTripExactly(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Arms, cfg.Seeds = cfg.Arms[:1], []uint64{4}
	run := Run{Arm: cfg.Arms[0], Seed: 4, Interval: 250 * time.Millisecond, Running: [][]int{{1, 2}, {0, 3}}, Window: 1.5, Span: 2.25,
		Engines: []EngineStats{{Addr: "127.0.1.1:8000", PrefixQueries: 10, PrefixHits: 7, Requests: 2}},
		Rows: []Row{
			{Index: 0, PrefixID: 3, SendAt: 0.1, TTFT: 0.123456789, E2E: 1.5, PromptTokens: 1579, CompletionTokens: 3, Status: "ok",
				ITLs: []float64{float64(15234567) / 1e6, float64(1) / 1e6}, Engine: "127.0.1.1:8000", CachedTokens: 1536, LoadedTokens: 7, Preemptions: 1},
			{Index: 1, PrefixID: -1, SendAt: 0.2, TTFT: math.NaN(), E2E: math.NaN(), Status: "error", Error: "status 503"},
		}}
	dir := t.TempDir()
	meta := Meta{Mode: ModeLive, Command: "loadaware-bench live", Wall: 1500 * time.Millisecond, Workers: 1,
		Live: []LiveInfo{{Messages: 9, Received: 9, WarmEvents: 4, WallSeconds: 1.5}}, Reference: []Run{run}}
	if err := Save(dir, Results{Config: cfg, Runs: []Run{run}}, meta); err != nil {
		t.Fatal(err)
	}
	res, got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	nanOK := cmp.Comparer(func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) })
	if diff := cmp.Diff(Results{Config: cfg, Runs: []Run{run}}, res, nanOK); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(meta, got, nanOK); diff != "" {
		t.Errorf("meta (-want +got):\n%s", diff)
	}
	if _, _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "loadaware-bench sweep") {
		t.Errorf("loading an empty directory: %v, want an error saying to run the sweep", err)
	}
}
