package capture

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/bench/internal/errcheck"
)

func TestLoadGood(t *testing.T) {
	root := t.TempDir()
	writeGoodCell(t, root, "20260101-000000-loadaware-b0.5", `"0.5"`)
	writeGoodCell(t, root, "20260101-010000-loadaware-b1.0", `1.0`)
	writeFile(t, root, "summary-per-seed.csv", "not a cell\n")
	cells, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 2 {
		t.Fatalf("%d cells, want 2", len(cells))
	}
	c := cells[0]
	if c.Name != "20260101-000000-loadaware-b0.5" || c.Arm != "loadaware" || c.Beta == nil || *c.Beta != 0.5 ||
		c.Rate != 16 || c.Start != 1000 || c.End != 1030 {
		t.Errorf("cell header = %+v", c)
	}
	if got := []string{cells[0].ArmLabel(), cells[1].ArmLabel()}; got[0] != "loadaware-b0.5" || got[1] != "loadaware-b1" {
		t.Errorf("arm labels %v", got)
	}
	if len(c.Seeds) != 2 || c.Seeds[0].Seed != 1 || c.Seeds[1].Seed != 2 || len(c.Seeds[1].Requests) != 3 {
		t.Fatalf("seeds = %+v", c.Seeds)
	}
	r := c.Seeds[0].Requests
	if r[0].Index != 0 || r[0].PrefixID != 5 || r[0].Send != 1001 || r[0].TTFT != 0.1 || r[0].E2E != 1 ||
		r[0].PromptTokens != 1578 || r[0].CompletionTokens != 3 || !r[0].OK || len(r[0].ITLs) != 3 || r[0].ITLs[2] != 90 {
		t.Errorf("row 0 = %+v", r[0])
	}
	if r[1].OK || r[1].Error != "RuntimeError: HTTP 500, Internal" || r[1].TTFT != 0 || r[1].ITLs != nil {
		t.Errorf("error row = %+v", r[1])
	}
	if len(r[2].ITLs) != 2 {
		t.Errorf("trailing ';' row ITLs = %v", r[2].ITLs)
	}
	run := c.Prom[RunningMetric]
	if len(run) != 2 || run[0].Instance != engA || run[1].Instance != engB || len(run[0].T) != 7 || run[1].V[3] != 4 {
		t.Errorf("running series = %+v", run)
	}
	if _, ok := c.Prom["process_cpu_seconds_total"]; ok {
		t.Error("router-only metric kept")
	}
	// One cell directory loads too.
	one, err := Load(filepath.Join(root, "20260101-010000-loadaware-b1.0"))
	if err != nil || len(one) != 1 || one[0].Beta == nil || *one[0].Beta != 1 {
		t.Fatalf("Load(cell dir) = %+v, %v", one, err)
	}
}

func TestLoadNullBeta(t *testing.T) {
	dir := writeGoodCell(t, t.TempDir(), "x-kvaware", "null")
	writeFile(t, dir, "run.json", `{"arm": "kvaware", "beta": null, "rate_req_s": 16}`)
	c, err := LoadCell(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Beta != nil || c.ArmLabel() != "kvaware" || len(c.Seeds) != 2 {
		t.Errorf("beta %v label %q seeds %d", c.Beta, c.ArmLabel(), len(c.Seeds))
	}
}

// TestLoadBad: each broken directory fails with an error naming the file (and
// the line for CSV rows).
func TestLoadBad(t *testing.T) {
	row := "0,5,1001,0.1,1.0,1578,3,ok,,20.0\n"
	cases := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   []string
	}{
		{"no run.json", func(t *testing.T, dir string) { rm(t, dir, "run.json") }, []string{"no cell directories"}},
		{"bad run.json", func(t *testing.T, dir string) { writeFile(t, dir, "run.json", `{"arm": `) }, []string{"run.json", "bad JSON"}},
		{"no arm", func(t *testing.T, dir string) { writeFile(t, dir, "run.json", `{"rate_req_s": 1}`) }, []string{"run.json", "arm"}},
		{"bad beta", func(t *testing.T, dir string) {
			writeFile(t, dir, "run.json", `{"arm": "a", "beta": "x", "rate_req_s": 1}`)
		}, []string{"run.json", "beta"}},
		{"missing window.env", func(t *testing.T, dir string) { rm(t, dir, "window.env") }, []string{"window.env"}},
		{"bad window", func(t *testing.T, dir string) { writeFile(t, dir, "window.env", "CELL_START=a\nCELL_END=2\n") }, []string{"window.env", "CELL_START"}},
		{"window reversed", func(t *testing.T, dir string) { writeFile(t, dir, "window.env", "CELL_START=3\nCELL_END=2\n") }, []string{"window.env"}},
		{"missing seed file", func(t *testing.T, dir string) { rm(t, dir, "driver-seed2.csv") }, []string{"driver-seed2.csv", "missing"}},
		{"seed not in manifest", func(t *testing.T, dir string) { writeFile(t, dir, "driver-seed3.csv", goodSeed(1)) }, []string{"driver-seed3.csv", "manifest"}},
		{"empty csv", func(t *testing.T, dir string) { writeFile(t, dir, "driver-seed1.csv", "") }, []string{"driver-seed1.csv", "empty"}},
		{"header only", func(t *testing.T, dir string) { writeFile(t, dir, "driver-seed1.csv", goodHeader) }, []string{"driver-seed1.csv", "no rows"}},
		{"bad header", func(t *testing.T, dir string) {
			writeFile(t, dir, "driver-seed1.csv", strings.Replace(goodHeader, "ttft_s", "ttft", 1)+row)
		}, []string{"driver-seed1.csv", "line 1", "ttft_s"}},
		{"bad number at row 3", func(t *testing.T, dir string) {
			writeFile(t, dir, "driver-seed2.csv", goodHeader+row+row+"2,5,1003,zero,1.0,1578,3,ok,,20.0\n")
		}, []string{"driver-seed2.csv", "line 4", "ttft_s", `"zero"`}},
		{"ok row without ttft", func(t *testing.T, dir string) {
			writeFile(t, dir, "driver-seed1.csv", goodHeader+"0,5,1001,,1.0,1578,3,ok,,20.0\n")
		}, []string{"driver-seed1.csv", "line 2", "ttft_s", "empty"}},
		{"negative e2e", func(t *testing.T, dir string) {
			writeFile(t, dir, "driver-seed1.csv", goodHeader+"0,5,1001,0.1,-1,1578,3,ok,,20.0\n")
		}, []string{"driver-seed1.csv", "line 2", "e2e_s"}},
		{"bad itl", func(t *testing.T, dir string) {
			writeFile(t, dir, "driver-seed1.csv", goodHeader+"0,5,1001,0.1,1,1578,3,ok,,20.0;NaN\n")
		}, []string{"driver-seed1.csv", "line 2", "itls_ms", "gap 2"}},
		{"short row", func(t *testing.T, dir string) {
			writeFile(t, dir, "driver-seed1.csv", goodHeader+row+"1,5,1002\n")
		}, []string{"driver-seed1.csv", "line 3", "fields"}},
		{"no prom dir", func(t *testing.T, dir string) { rmAll(t, dir, "prom") }, []string{"prom", "missing"}},
		{"no running file", func(t *testing.T, dir string) { rm(t, dir, "prom/"+RunningMetric+".json") }, []string{RunningMetric + ".json", "missing"}},
		{"bad prom json", func(t *testing.T, dir string) {
			writeFile(t, dir, "prom/"+KVUsageMetric+".json", `{"status": "success", "data": [`)
		}, []string{KVUsageMetric + ".json", "bad JSON"}},
		{"prom error status", func(t *testing.T, dir string) {
			writeFile(t, dir, "prom/"+KVUsageMetric+".json", `{"status": "error"}`)
		}, []string{KVUsageMetric + ".json", "status"}},
		{"prom vector", func(t *testing.T, dir string) {
			writeFile(t, dir, "prom/"+KVUsageMetric+".json", `{"status": "success", "data": {"resultType": "vector", "result": []}}`)
		}, []string{KVUsageMetric + ".json", "matrix"}},
		{"empty matrix", func(t *testing.T, dir string) { writeFile(t, dir, "prom/"+WaitingMetric+".json", promMatrix(1000)) }, []string{WaitingMetric + ".json", "empty matrix"}},
		{"no engine series", func(t *testing.T, dir string) {
			writeFile(t, dir, "prom/"+RunningMetric+".json", promMatrix(1000, router("a", 1, 2)))
		}, []string{RunningMetric + ".json", "no engine series"}},
		{"two series one instance", func(t *testing.T, dir string) {
			writeFile(t, dir, "prom/"+RunningMetric+".json", promMatrix(1000, engine(engA, 1), engine(engA, 2)))
		}, []string{RunningMetric + ".json", "two engine series", engA}},
		{"bad sample value", func(t *testing.T, dir string) {
			writeFile(t, dir, "prom/"+KVUsageMetric+".json", `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"a"},"values":[[1,"x"]]}]}}`)
		}, []string{KVUsageMetric + ".json", "sample 0", `"x"`}},
		{"unordered samples", func(t *testing.T, dir string) {
			writeFile(t, dir, "prom/"+KVUsageMetric+".json", `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"a"},"values":[[2,"1"],[1,"1"]]}]}}`)
		}, []string{KVUsageMetric + ".json", "sample 1", "not after"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := writeGoodCell(t, root, "c", "1")
			tc.break_(t, dir)
			_, err := Load(root)
			t.Log(err)
			mustContain(t, err, tc.want...)
		})
	}
}

func rm(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func rmAll(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// A row's error is its first bad column's, and a failed request may leave its
// measured columns empty.
func TestParseRow(t *testing.T) {
	h, err := parseDriverHeader(driverColumns)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		rec     string // in driverColumns' order
		want    Request
		wantErr string
	}{
		{"ok", "3,5,1001.5,0.25,1.5,1578,3,ok,,20;30;", Request{Index: 3, PrefixID: 5, Send: 1001.5, TTFT: 0.25, E2E: 1.5,
			PromptTokens: 1578, CompletionTokens: 3, OK: true, ITLs: []float64{20, 30}}, ""},
		{"failed with empty measures", "3,5,1001.5,,2,,,error, timeout ,", Request{Index: 3, PrefixID: 5, Send: 1001.5, E2E: 2,
			Error: " timeout "}, ""},
		{"first of two bad columns", "x,5,1001.5,0.25,-1,1578,3,ok,,", Request{}, `column index: bad non-negative integer "x"`},
		{"required column empty on a failed row", "3,5,1001.5,,,,,error,,", Request{}, "column e2e_s: empty"},
		{"empty gap", "3,5,1001.5,0.25,1.5,1578,3,ok,,20;;30", Request{}, "column itls_ms: empty (gap 2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := h.parseRow(strings.Split(tt.rec, ","))
			if errcheck.Done(t, err, tt.wantErr) {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
