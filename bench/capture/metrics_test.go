package capture

import (
	"math"
	"path/filepath"
	"testing"
)

func same(a, b float64) bool {
	return a == b || (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-12
}

func TestSeedMetrics(t *testing.T) {
	rows := []Request{
		{Send: 100, TTFT: 0.1, E2E: 1, OK: true, CompletionTokens: 3, ITLs: []float64{20, 30, 90}},
		{Send: 99, E2E: 0.02, OK: false, Error: "HTTP 500"},
		{Send: 101, TTFT: 0.3, E2E: 2, OK: true, CompletionTokens: 2, ITLs: []float64{10, 100}},
		{Send: 102, TTFT: 0.2, E2E: 0.5, OK: true, CompletionTokens: 5},
	}
	m := SeedMetrics(rows)
	// ok TTFTs 0.1, 0.2, 0.3; gaps (s) .01 .02 .03 .09 .10; window 99 .. 103.
	want := map[string]float64{
		OKCount: 3, Errors: 1,
		TTFTMean: 0.2, TTFTP50: 0.2, TTFTP90: 0.3, TTFTP95: 0.3, TTFTP99: 0.3,
		ITLP50: 0.03, ITLP95: 0.10, ITLP99: 0.10, ITLStall: 2.0 / 5,
		E2EMean: 3.5 / 3, E2EP95: 2, E2EP99: 2,
		ReqS: 3.0 / 4, TokS: 10.0 / 4,
	}
	for k, w := range want {
		if !same(m[k], w) {
			t.Errorf("%s = %v, want %v", k, m[k], w)
		}
	}
	if _, ok := m[ImbalanceKey]; ok {
		t.Error("SeedMetrics set imbalance")
	}
	none := SeedMetrics([]Request{{Send: 1, OK: false}})
	if none[Errors] != 1 || !math.IsNaN(none[TTFTP95]) || !math.IsNaN(none[ReqS]) || !math.IsNaN(none[ITLStall]) {
		t.Errorf("no ok rows: %v", none)
	}
}

func TestMetric(t *testing.T) {
	m := map[string]float64{ReqS: 2.5, TTFTP95: math.Inf(1)}
	tests := []struct {
		name, key string
		want      float64
	}{
		{"a value", ReqS, 2.5},
		{"an infinite value", TTFTP95, math.Inf(1)},
		{"an absent key is NaN", ImbalanceKey, math.NaN()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Metric(m, tc.key); !same(got, tc.want) {
				t.Errorf("Metric(%q) = %v, want %v", tc.key, got, tc.want)
			}
		})
	}
}

func TestGoodput(t *testing.T) {
	rows := []Request{
		{Send: 100, TTFT: 0.1, E2E: 1, OK: true},
		{Send: 99, E2E: 0.02, OK: false, Error: "HTTP 500"},
		{Send: 101, TTFT: 0.3, E2E: 2, OK: true},
		{Send: 102, TTFT: 0.15, E2E: 0.5, OK: true},
	}
	tests := []struct {
		name string
		rows []Request
		slo  float64
		want float64
	}{
		{"objective met by two of three ok rows, window 99..103", rows, 0.15, 2.0 / 4},
		{"every ok row meets a loose objective", rows, 1, 3.0 / 4},
		{"none meets a tight one", rows, 0.05, 0},
		{"failed rows never count, even with TTFT 0", rows[1:2], 1, math.NaN()},
		{"no rows", nil, 1, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Goodput(tt.rows, tt.slo); !same(got, tt.want) {
				t.Fatalf("Goodput = %v, want %v", got, tt.want)
			}
		})
	}
}

// The span runs from the earliest send of any row to the latest end of an ok row.
func TestPerSecond(t *testing.T) {
	tests := []struct {
		name string
		rows []Request
		want float64
	}{
		{"one ok row", []Request{{Send: 100, E2E: 2, OK: true}}, 6.0 / 2},
		{"an earlier failed send widens it", []Request{{Send: 100, E2E: 2, OK: true}, {Send: 98, OK: false}}, 6.0 / 4},
		{"a later failed end does not", []Request{{Send: 100, E2E: 2, OK: true}, {Send: 101, E2E: 9, OK: false}}, 6.0 / 2},
		{"no ok row", []Request{{Send: 100, E2E: 2, OK: false}}, math.NaN()},
		{"an ok row that ends as it starts", []Request{{Send: 100, OK: true}}, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PerSecond(6, tt.rows); !same(got, tt.want) {
				t.Fatalf("PerSecond = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestImbalance(t *testing.T) {
	a := Series{Instance: "a", T: []float64{0, 5, 10, 15}, V: []float64{1, 2, 3, 100}}
	b := Series{Instance: "b", T: []float64{0, 5, 10, 15}, V: []float64{4, 4, 4, 1}}
	zero := Series{Instance: "z", T: []float64{0, 5}, V: []float64{0, 0}}
	cases := []struct {
		name     string
		ss       []Series
		from, to float64
		want     float64
	}{
		{"closed both ends", []Series{a, b}, 0, 10, 4.0 / 2}, // samples at 0, 5, 10
		{"inside", []Series{a, b}, 0.1, 9.9, 4.0 / 2},        // only t=5
		{"all", []Series{a, b}, 0, 15, 26.5 / 3.25},
		{"order free", []Series{b, a}, 4, 11, 4.0 / 2.5},
		{"idle engine", []Series{a, zero}, 0, 5, math.Inf(1)},
		{"both idle", []Series{zero, zero}, 0, 5, math.NaN()},
		{"no sample in window", []Series{a, b}, 1, 2, math.NaN()},
		{"one engine", []Series{a}, 0, 15, math.NaN()},
	}
	for _, tc := range cases {
		if got := Imbalance(tc.ss, tc.from, tc.to); !same(got, tc.want) {
			t.Errorf("%s: Imbalance = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIncrease(t *testing.T) {
	cases := []struct {
		v    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 0},
		{[]float64{5, 7, 7, 10}, 5},
		{[]float64{5, 40, 2, 3}, 35 + 2 + 1}, // reset: the new value counts from 0
	}
	for _, tc := range cases {
		if got := Increase(tc.v); got != tc.want {
			t.Errorf("Increase(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestArmLabel(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	cases := []struct {
		arm  string
		beta *float64
		want string
	}{
		{"kvaware", nil, "kvaware"},
		{"roundrobin", nil, "roundrobin"},
		{"loadaware", f(0), "loadaware-b0"},
		{"loadaware", f(0.5), "loadaware-b0.5"},
		{"loadaware", f(1.0), "loadaware-b1"},
		{"loadaware", f(2), "loadaware-b2"},
	}
	for _, tc := range cases {
		if got := (Cell{Arm: tc.arm, Beta: tc.beta}).ArmLabel(); got != tc.want {
			t.Errorf("ArmLabel(%s, %v) = %q, want %q", tc.arm, tc.beta, got, tc.want)
		}
	}
}

func TestCellSeedMetricsAndFacts(t *testing.T) {
	dir := writeGoodCell(t, t.TempDir(), "c", "1")
	c, err := LoadCell(dir)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.SeedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	// Seed 1 sends over [1001, 1003] and seed 2 over [1011, 1013]: no 5 s
	// sample falls in either window, so imbalance is NaN.
	if len(ms) != 2 || !math.IsNaN(ms[0][ImbalanceKey]) || ms[1][OKCount] != 2 {
		t.Errorf("seed metrics %v", ms)
	}
	c.Seeds[0].Requests[2].Send = 1016 // window [1001, 1016]: samples at 1005, 1010, 1015
	ms, _ = c.SeedMetrics()
	if got := ms[0][ImbalanceKey]; !same(got, (2+2+4)/3.0/1) {
		t.Errorf("imbalance = %v", got)
	}

	f, err := c.Facts()
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want []float64
	}{
		{"hit rate", []float64{f.HitRate}, []float64{80.0 / 157}},
		{"waiting any", []float64{f.WaitingShare}, []float64{2.0 / 7}},
		{"waiting per engine", f.WaitingShareEngine, []float64{1.0 / 7, 1.0 / 7}},
		{"preemptions", f.Preemptions, []float64{3, 0}},
		{"kv max", f.KVUsageMax, []float64{0.5, 0.3}},
		{"cpu tier", f.CPUTierBytes, []float64{4, 1}},
		{"request share", f.RequestShare, []float64{1.0 / 3, 2.0 / 3}},
		{"engine ttft", f.EngineTTFTMean, []float64{1, 0.5}},
		{"prefill", f.PrefillMean, []float64{math.NaN(), 0.25}},
	}
	if len(f.Instances) != 2 || f.Instances[0] != engA || f.Instances[1] != engB {
		t.Errorf("instances %v", f.Instances)
	}
	for _, ck := range checks {
		if len(ck.got) != len(ck.want) {
			t.Errorf("%s: %v, want %v", ck.name, ck.got, ck.want)
			continue
		}
		for i := range ck.got {
			if !same(ck.got[i], ck.want[i]) {
				t.Errorf("%s: %v, want %v", ck.name, ck.got, ck.want)
			}
		}
	}
}

func TestFactsMissingMetric(t *testing.T) {
	dir := writeGoodCell(t, t.TempDir(), "c", "1")
	rm(t, dir, filepath.Join("prom", CPUTierMetric+".json"))
	writeFile(t, dir, "prom/"+HitsMetric+".json", promMatrix(1000, engine(engA, 1)))
	c, err := LoadCell(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Facts()
	mustContain(t, err, HitsMetric+".json", engB)
	writeGoodCell(t, filepath.Dir(dir), "c", "1")
	rm(t, dir, filepath.Join("prom", CPUTierMetric+".json"))
	c, _ = LoadCell(dir)
	_, err = c.Facts()
	mustContain(t, err, CPUTierMetric+".json", "missing")
}

// Per-seed facts use only each seed's send window: a gen2 kvaware seed keeps
// the cell's flat CPU tier and no waiting, a seed window without samples gives
// NaN rather than a panic.
func TestSeedFactsWindows(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	var cell Cell
	for _, cc := range c.Cells {
		if cc.ArmLabel() == "kvaware" {
			cell = cc.Cell()
		}
	}
	fs, err := cell.SeedFacts()
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 20 {
		t.Fatalf("%d seed facts, want 20", len(fs))
	}
	whole, err := cell.Facts()
	if err != nil {
		t.Fatal(err)
	}
	var share float64
	for i, f := range fs {
		if f.WaitingShare != 0 || f.CPUTierBytes[0] != whole.CPUTierBytes[0] {
			t.Errorf("seed %d: waiting %v, CPU tier %v: want 0 and the cell's flat %v", i+1, f.WaitingShare, f.CPUTierBytes[0], whole.CPUTierBytes[0])
		}
		share += f.RequestShare[1] / 20
	}
	// The 10.131.* engine (index 1) is kvaware's busy one in every window, about as in the whole cell.
	if math.Abs(share-whole.RequestShare[1]) > 0.03 {
		t.Errorf("mean per-seed share %v, cell %v", share, whole.RequestShare[1])
	}
	empty := cell
	empty.Seeds = []Seed{{Seed: 1, Requests: []Request{{Send: 1}, {Send: 2}}}} // before the first sample
	fs, err = empty.SeedFacts()
	if err != nil || !math.IsNaN(fs[0].KVUsageMax[0]) || !math.IsNaN(fs[0].CPUTierBytes[0]) {
		t.Fatalf("empty window: %+v, %v: want NaN facts", fs, err)
	}
}
