package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The numbers below were printed by this command at commit 2cf3323, before the bench was
// reorganised around bench/experiment (decision 1510), by these runs:
//
//	loadaware-bench tournament -profiles published,chat,long,fleet8 -arms latencyaware,loadaware-b1,kvaware -seeds 1-20 -json FILE
//	loadaware-bench replay -json FILE
//	loadaware-bench sweep -arms kvaware,loadaware-b1 -seeds 1-2 -csv=false -save=false
//
// Each case reruns a short slice of one of them (cells are seeded and run their seeds in
// order, so a slice's seeds equal the full run's) and checks a handful of per-seed metrics.
// A refactor of the bench must leave every one of them exactly as it is; a change of the
// model or the metrics updates them with a decision record that says why.
//
// They simulate whole published warm-ups, seconds each, ten times that under the race
// detector, which adds nothing to a check of numbers: under -race they skip, and `make test`
// runs them without it (`make pins`).

// skipUnderRace skips a pinned-number test under the race detector.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("pinned numbers run without -race: make pins")
	}
}

// TestPinnedTournamentSeeds checks per-seed metrics of the published profile's loadaware-b1
// cell, as the tournament's JSON writes them.
func TestPinnedTournamentSeeds(t *testing.T) {
	skipUnderRace(t)
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "t.json")
	runOK(t, "tournament", "-quiet", "-profiles", "published", "-arms", "loadaware-b1", "-seeds", "1-2",
		"-json", jsonPath, "-out", filepath.Join(dir, "t.md"))
	var got struct {
		Profiles []struct {
			Name string
			Arms []struct {
				Arm   string
				Seeds []map[string]float64
			}
		}
	}
	readJSON(t, jsonPath, &got)
	want := []map[string]float64{
		{"seed": 1, "ttft_p50": 0.135713, "ttft_p95": 0.303787, "imbalance": 1.17317, "hit_rate": 0.902163, "req_s": 14.5596, "goodput_150ms": 8.38634},
		{"seed": 2, "ttft_p50": 0.121877, "ttft_p95": 0.246385, "imbalance": 1.05694, "hit_rate": 0.891541, "req_s": 14.2935, "goodput_150ms": 9.77673},
	}
	if len(got.Profiles) != 1 || len(got.Profiles[0].Arms) != 1 || len(got.Profiles[0].Arms[0].Seeds) != len(want) {
		t.Fatalf("tournament JSON has the wrong shape: %+v", got)
	}
	for i, w := range want {
		checkPinned(t, "tournament published loadaware-b1 seed "+strconv.Itoa(i+1), got.Profiles[0].Arms[0].Seeds[i], w)
	}
}

// TestPinnedReplaySeed checks the first seed of the measured kvaware cell, real and
// simulated, as the replay's JSON writes it.
func TestPinnedReplaySeed(t *testing.T) {
	skipUnderRace(t)
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	runOK(t, "replay", "-quiet", "-cells", "kvaware", "-seeds", "1", "-json", jsonPath)
	var got struct {
		Cells []struct {
			Arm   string
			Seeds []struct {
				Seed      int
				Real, Sim map[string]float64
			}
		}
	}
	readJSON(t, jsonPath, &got)
	if len(got.Cells) != 1 || len(got.Cells[0].Seeds) != 1 || got.Cells[0].Seeds[0].Seed != 1 {
		t.Fatalf("replay JSON has the wrong shape: %+v", got)
	}
	s := got.Cells[0].Seeds[0]
	checkPinned(t, "replay kvaware seed 1, real", s.Real, map[string]float64{
		"ttft_p95": 0.21210274496115744, "imbalance": 2.0853658536585367, "itl_p95": 0.09505, "req_s": 14.649982312319176})
	checkPinned(t, "replay kvaware seed 1, simulated", s.Sim, map[string]float64{
		"ttft_p50": 0.173456581, "ttft_p95": 0.280288753, "imbalance": 1.5882352941176472, "itl_p95": 0.108874867,
		"e2e_p95": 4.860585377, "req_s": 14.586400656414193})
}

// TestPinnedSweepSeeds checks seeds.csv of a two-arm, two-seed sweep.
func TestPinnedSweepSeeds(t *testing.T) {
	skipUnderRace(t)
	dir := t.TempDir()
	runOK(t, "sweep", "-arms", "kvaware,loadaware-b1", "-seeds", "1-2", "-csv=false", "-save=false", "-progress=false", "-out", dir)
	f, err := os.Open(filepath.Join(dir, "seeds.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"arm", "seed", "requests", "errors", "TTFT p50", "TTFT p95", "TTFT p99", "ITL p95", "e2e p95", "req/s", "imbalance", "hit rate", "miss@150ms", "ttft_mean", "itl_p50", "e2e_p50", "tok/s", "preemptions"},
		{"kvaware", "1", "500", "0", "0.251434", "0.556070", "0.734588", "0.270300", "11.968560", "14.194080", "4.684958", "0.908018", "0.838000", "0.289425", "0.088643", "7.137297", "908.421", "0"},
		{"kvaware", "2", "500", "0", "0.170607", "0.331381", "0.394996", "0.114998", "4.785237", "14.266692", "1.788003", "0.914320", "0.698000", "0.186934", "0.043488", "3.631406", "913.068", "0"},
		{"loadaware-b1", "1", "500", "0", "0.203356", "0.453934", "0.976359", "0.155699", "7.366835", "15.247208", "1.191122", "0.888461", "0.878000", "0.241299", "0.056617", "4.526185", "975.821", "0"},
		{"loadaware-b1", "2", "500", "0", "0.171407", "0.400972", "0.959201", "0.100201", "5.031193", "14.239674", "1.142766", "0.898067", "0.684000", "0.208340", "0.045636", "3.493500", "911.339", "0"},
	}
	if len(rows) != len(want) {
		t.Fatalf("seeds.csv has %d lines, want %d", len(rows), len(want))
	}
	for i := range want {
		for j := range want[i] {
			if j >= len(rows[i]) || rows[i][j] != want[i][j] {
				t.Errorf("seeds.csv line %d: got %q, want %q", i+1, rows[i], want[i])
				break
			}
		}
	}
}

func runOK(t *testing.T, args ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), args, &out, &errOut); code != 0 {
		t.Fatalf("loadaware-bench %v: exit %d: %s", args, code, errOut.String())
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// checkPinned reports every key of want whose value in got is missing or not exactly equal.
func checkPinned(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: %s = %v (present %v), pinned %v", what, k, g, ok, w)
		}
	}
}
