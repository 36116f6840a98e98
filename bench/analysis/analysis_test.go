package analysis

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

func row(i int, ttft, e2e float64, itls ...float64) experiment.Row {
	return experiment.Row{Index: i, PrefixID: i % 3, SendAt: float64(i) / 10, TTFT: ttft, E2E: e2e, PromptTokens: 1579,
		CompletionTokens: len(itls) + 1, Status: "ok", ITLs: itls}
}

func TestSeedMetricsOf(t *testing.T) {
	run := experiment.Run{
		Arm:  experiment.Arm{Name: "kvaware", Policy: "kvaware"},
		Seed: 3,
		Rows: []experiment.Row{
			row(0, 0.1, 1.0, 100, 200),
			row(1, 0.2, 2.0, 300),
			row(2, 0.3, 3.0, 400),
			{Index: 3, Status: "error", Error: "boom", TTFT: math.NaN(), E2E: math.NaN()},
		},
		Running: [][]int{{4, 1}, {2, 1}, {6, 1}},
		Engines: []experiment.EngineStats{{PrefixQueries: 100, PrefixHits: 90, Preemptions: 1}, {PrefixQueries: 100, PrefixHits: 50}},
		Span:    2,
	}
	m := SeedMetricsOf(run)
	checks := []struct {
		name      string
		got, want float64
	}{
		{"error rate", m.ErrorRate, 0.25},
		{"TTFT p50", m.TTFT.P50, 0.2},
		{"TTFT p95", m.TTFT.P95, 0.29},
		{"TTFT mean", m.TTFT.Mean, 0.2},
		{"ITL p50 in seconds", m.ITL.P50, 0.25},
		{"e2e p99", m.E2E.P99, 2.98},
		{"req/s over the span", m.ReqPerSec, 1.5},
		{"tok/s", m.TokPerSec, 3.5},
		{"imbalance 4/1", m.Imbalance, 4},
		{"fleet hit rate", m.HitRate, 0.7},
		{"engine 1 hit rate", m.EngineHits[1], 0.5},
		{"miss@150ms counts errors", m.MissHeadline, 0.75},
		{"goodput at 50 ms", m.Goodput[0], 0},
		{"goodput at 200 ms", m.Goodput[6], 0.5},
		{"goodput at 400 ms", m.Goodput[len(m.Goodput)-1], 0.75},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if m.Errors != 1 || m.Preemptions != 1 || len(Objectives()) != 15 {
		t.Errorf("errors %d preemptions %d objectives %d", m.Errors, m.Preemptions, len(Objectives()))
	}
}

func TestImbalanceEdges(t *testing.T) {
	tests := []struct {
		name    string
		samples [][]int
		want    float64
	}{
		{"even", [][]int{{3, 3}}, 1},
		{"idle engine", [][]int{{3, 0}, {1, 0}}, math.Inf(1)},
		{"both idle", [][]int{{0, 0}}, 1},
		{"no samples", nil, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got := imbalance(tt.samples)
			if !(got == tt.want || (math.IsNaN(got) && math.IsNaN(tt.want))) {
				t.Fatalf("imbalance = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWriteCSV(t *testing.T) {
	var buf bytes.Buffer
	rows := []experiment.Row{row(0, 0.1234567, 1.5, 20.25, 30), {Index: 1, PrefixID: -1, SendAt: 0.5, TTFT: math.NaN(), E2E: math.NaN(), PromptTokens: 2081, Status: "error", Error: "refused, too long"}}
	if err := WriteCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	want := "index,prefix_id,send_ts,ttft_s,e2e_s,prompt_tokens,completion_tokens,status,error,itls_ms\n" +
		"0,0,0.000000,0.123457,1.500000,1579,3,ok,,20.250;30.000\n" +
		"1,-1,0.500000,,,2081,0,error,\"refused, too long\",\n"
	if got := buf.String(); got != want {
		t.Fatalf("CSV:\n%s\nwant:\n%s", got, want)
	}
}

// synthetic builds a sweep result where loadaware halves kvaware's imbalance
// on every seed and leaves TTFT unchanged.
func synthetic(seeds int) experiment.Results {
	var res experiment.Results
	for _, arm := range []experiment.Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "roundrobin", Policy: "roundrobin"}, {Name: "loadaware-b1", Policy: "loadaware", Beta: 1}} {
		for s := range seeds {
			busy := 4 + s%3
			if arm.Name == "loadaware-b1" {
				busy = 2
			}
			ttft := 0.3 + 0.01*float64(s)
			if arm.Name == "roundrobin" {
				ttft = 10
			}
			res.Runs = append(res.Runs, experiment.Run{Arm: arm, Seed: uint64(s + 1), Span: 35,
				Rows:    []experiment.Row{row(0, ttft, 5, 50), row(1, ttft, 6, 60)},
				Running: [][]int{{busy, 2}},
				Engines: []experiment.EngineStats{{PrefixQueries: 10, PrefixHits: 9}}})
		}
	}
	res.Config = experiment.DefaultConfig()
	return res
}

func TestAnalyzeComparesPairedSeeds(t *testing.T) {
	a, err := Analyze(synthetic(10))
	if err != nil {
		t.Fatal(err)
	}
	imb, ok := a.Comparison("loadaware-b1", "imbalance")
	if !ok {
		t.Fatal("no imbalance comparison for loadaware-b1")
	}
	// Ten of ten seeds improve: p = 2^-10.
	if imb.Improved != 10 || math.Abs(imb.Test.P-1.0/1024) > 1e-12 || !imb.Significant(Alpha) {
		t.Fatalf("imbalance comparison %+v", imb)
	}
	ttft, _ := a.Comparison("loadaware-b1", "TTFT p95")
	if ttft.Significant(Alpha) || ttft.Test.N != 0 {
		t.Fatalf("identical TTFTs must be a null result: %+v", ttft)
	}
	s, _ := a.Arm("kvaware")
	if s.Seeds != 10 || s.Median["req/s"] != 2.0/35 {
		t.Fatalf("kvaware summary %+v", s)
	}
	// Every published row is a calibration row: 4 tolerances for each of the 3 arms.
	if len(a.Calibration) != 12 || a.Reproduced {
		t.Fatalf("%d calibration checks, reproduced=%v: want 12 and false for synthetic data", len(a.Calibration), a.Reproduced)
	}
	if _, err := Analyze(experiment.Results{}); err == nil {
		t.Fatal("no runs: want an error")
	}
	claims := a.Claims()
	// The arms give the beta=1 claims only: imbalance (halved: agrees) and TTFT p95 (unchanged: does not).
	if len(claims) != 2 || !claims[0].Agrees || claims[1].Agrees || !strings.Contains(claims[0].Text, "beta=1") {
		t.Fatalf("claims %+v", claims)
	}
}

func TestOrderingAndTolerances(t *testing.T) {
	a := Analysis{Arms: []ArmSummary{
		{Arm: experiment.Arm{Name: "kvaware"}, Median: map[string]float64{"TTFT p95": 0.33, "imbalance": 2.2, "req/s": 14, "hit rate": 0.95}},
		{Arm: experiment.Arm{Name: "roundrobin"}, Median: map[string]float64{"TTFT p95": 9.9, "imbalance": 1.1, "req/s": 7, "hit rate": 0.7}},
	}}
	checks := a.calibrate()
	pass := map[string]bool{}
	for _, c := range checks {
		pass[c.Arm+" "+c.Metric] = c.Pass
	}
	want := map[string]bool{
		"kvaware TTFT p95": true, "kvaware imbalance": true, "kvaware req/s": true, "kvaware hit rate": true,
		"roundrobin TTFT p95": true, "roundrobin req/s": false, "roundrobin imbalance": false, "roundrobin hit rate": true,
	}
	for k, v := range want {
		if pass[k] != v {
			t.Errorf("%s: pass=%v, want %v", k, pass[k], v)
		}
	}
	o := a.ordering("imbalance")
	if !o.Pass || o.Pairs != 1 || o.Discordant != 0 {
		t.Errorf("imbalance ordering %+v", o)
	}
	a.Arms[0].Median["TTFT p95"] = 20
	if o := a.ordering("TTFT p95"); o.Pass || o.Discordant != 1 {
		t.Errorf("swapped TTFT ordering %+v", o)
	}
}

func TestWriteReportFromARealSweep(t *testing.T) {
	cfg := experiment.DefaultConfig()
	cfg.Arms = []experiment.Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "roundrobin", Policy: "roundrobin"}, {Name: "loadaware-b1", Policy: "loadaware", Beta: 1}}
	cfg.Seeds = []uint64{1, 2, 3}
	cfg.Workload.Requests = 80
	cfg.Warmup = 80
	res, err := vtime.RunSweep(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := WriteReport(dir, res, ReportOptions{Command: "loadaware-bench sweep", WallTime: time.Second, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"REPORT.md", "seeds.csv", "runs/kvaware/seed-01.csv", "runs/loadaware-b1/seed-03.csv",
		"figures/ttft_ecdf.png", "figures/ttft_p95_vs_beta.png", "figures/imbalance_vs_beta.png", "figures/inflight_over_time.png",
		"figures/goodput.png", "figures/paired_imbalance.png", "figures/paired_ttft_p95.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Verdict", "| kvaware | published |", "figures/goodput.png", "loadaware-bench sweep", "one-sided"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("REPORT.md lacks %q", want)
		}
	}
	seeds, _ := os.ReadFile(filepath.Join(dir, "seeds.csv"))
	if got := strings.Count(string(seeds), "\n"); got != 1+9 {
		t.Errorf("seeds.csv has %d lines, want a header and 9 runs", got)
	}
	if len(a.Seeds) != 9 {
		t.Errorf("%d seed metrics, want 9", len(a.Seeds))
	}
}
