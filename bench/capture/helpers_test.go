package capture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes content to dir/name, creating parent directories.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const goodHeader = "index,prefix_id,send_ts,ttft_s,e2e_s,prompt_tokens,completion_tokens,status,error,itls_ms\n"

// goodSeed is a driver CSV of three rows sent at base, base+1, base+2: two ok
// and one error row.
func goodSeed(base float64) string {
	return goodHeader +
		fmt.Sprintf("0,5,%v,0.1,1.0,1578,3,ok,,20.0;30.0;90.0\n", base) +
		fmt.Sprintf("1,7,%v,,0.02,,,error,\"RuntimeError: HTTP 500, Internal\",\n", base+1) +
		fmt.Sprintf("2,5,%v,0.3,2.0,1578,2,ok,,10.0;100.0;\n", base+2)
}

// promMatrix renders a query_range matrix; each series is labels plus values
// at t0, t0+5, ...
func promMatrix(t0 float64, series ...promSeries) string {
	type res struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	var rs []res
	for _, s := range series {
		r := res{Metric: s.labels, Values: [][2]any{}}
		for i, v := range s.values {
			r.Values = append(r.Values, [2]any{t0 + 5*float64(i), fmt.Sprint(v)})
		}
		rs = append(rs, r)
	}
	b, err := json.Marshal(map[string]any{"status": "success",
		"data": map[string]any{"resultType": "matrix", "result": rs}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

type promSeries struct {
	labels map[string]string
	values []float64
}

func engine(inst string, values ...float64) promSeries {
	return promSeries{map[string]string{"job": "vllm-engines", "instance": inst}, values}
}

func router(server string, values ...float64) promSeries {
	return promSeries{map[string]string{"job": "router", "instance": "stack-router-service:80", "server": server}, values}
}

// Synthetic cell: window 1000..1030, samples at 1000, 1005, ..., 1030 (7).
const (
	engA = "10.130.0.1:8000"
	engB = "10.131.0.1:8000"
)

// writeGoodCell writes a complete two-seed cell named name under root and
// returns its path.
func writeGoodCell(t *testing.T, root, name string, beta string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	writeFile(t, dir, "run.json", `{"arm": "loadaware", "beta": `+beta+`, "rate_req_s": 16.0,
 "workload_manifest": {"seeds": {"1": {"file": "seed-1.jsonl"}, "2": {"file": "seed-2.jsonl"}}}}`)
	writeFile(t, dir, "window.env", "CELL_START=1000\nCELL_END=1030\nDRIVER_NODE=x\n")
	writeFile(t, dir, "driver-seed1.csv", goodSeed(1001))
	writeFile(t, dir, "driver-seed2.csv", goodSeed(1011))
	prom := map[string][]promSeries{
		RunningMetric: {engine(engB, 2, 2, 2, 4, 4, 4, 4), engine(engA, 1, 1, 1, 1, 1, 1, 1),
			router("http://x", 9, 9, 9, 9, 9, 9, 9)},
		WaitingMetric:               {engine(engA, 0, 0, 1, 0, 0, 0, 0), engine(engB, 0, 0, 0, 2, 0, 0, 0)},
		KVUsageMetric:               {engine(engA, 0.1, 0.5, 0.2, 0, 0, 0, 0), engine(engB, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3)},
		PreemptionsMetric:           {engine(engA, 0, 0, 1, 1, 1, 1, 3), engine(engB, 0, 0, 0, 0, 0, 0, 0)},
		HitsMetric:                  {engine(engA, 0, 10, 20, 30, 40, 50, 60), engine(engB, 0, 0, 0, 0, 10, 20, 20)},
		QueriesMetric:               {engine(engA, 0, 20, 40, 60, 80, 100, 120), engine(engB, 5, 10, 20, 30, 40, 2, 2)},
		TTFTCountMetric:             {engine(engA, 0, 1, 2, 3, 4, 5, 6), engine(engB, 0, 2, 4, 6, 8, 10, 12)},
		TTFTSumMetric:               {engine(engA, 0, 1, 2, 3, 4, 5, 6), engine(engB, 0, 1, 2, 3, 4, 5, 6)},
		PrefillCountMetric:          {engine(engA, 0, 0, 0, 0, 0, 0, 0), engine(engB, 0, 2, 4, 6, 8, 10, 12)},
		PrefillSumMetric:            {engine(engA, 0, 0, 0, 0, 0, 0, 0), engine(engB, 0, 1, 1, 1, 1, 1, 3)},
		CPUTierMetric:               {engine(engA, 1, 2, 3, 4, 5, 6, 7), engine(engB, 0, 0, 0, 0, 0, 0, 7)},
		"process_cpu_seconds_total": {router("", 1, 2, 3, 4, 5, 6, 7)},
	}
	for m, ss := range prom {
		writeFile(t, dir, "prom/"+m+".json", promMatrix(1000, ss...))
	}
	return dir
}

func mustContain(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", wants)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}
