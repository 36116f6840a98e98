package capture

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func sampleCell() Cell {
	beta := 0.5
	return Cell{
		Name: "cell", Arm: "loadaware", Beta: &beta, Rate: 16, Start: 1700000000.25, End: 1700000100.5,
		Seeds: []Seed{
			{Seed: 1, Requests: []Request{
				{Index: 0, PrefixID: 3, Send: 1700000000.5, TTFT: 0.125, E2E: 1.5, PromptTokens: 1580, CompletionTokens: 64, OK: true, ITLs: []float64{20.5, 21}},
				{Index: 1, PrefixID: 0, Send: 1700000001, E2E: 0.25, Error: "503 Service Unavailable: no healthy upstream"},
			}},
			{Seed: 2, Requests: []Request{{Index: 0, PrefixID: 1, Send: 1700000050, TTFT: 0.2, E2E: 2, PromptTokens: 10, CompletionTokens: 1, OK: true}}},
		},
		Prom: map[string][]Series{
			RunningMetric: {
				{Instance: "10.0.0.1:8000", T: []float64{1700000000, 1700000005}, V: []float64{1, 3}, Labels: map[string]string{"__name__": RunningMetric, "instance": "10.0.0.1:8000", "job": "vllm"}},
				{Instance: "10.0.0.2:8000", T: []float64{1700000000}, V: []float64{0.5}, Labels: map[string]string{"__name__": RunningMetric, "instance": "10.0.0.2:8000", "job": "vllm"}},
			},
		},
	}
}

// writeCell writes c to dir (created if missing): run.json (with extra's keys
// added beside arm, beta, rate_req_s and the seed manifest), window.env, one
// driver-seed<N>.csv per seed and prom/<metric>.json per metric.
func writeCell(dir string, c Cell, extra map[string]any) error {
	for _, s := range c.Seeds {
		if err := WriteSeed(dir, s); err != nil {
			return err
		}
	}
	for _, m := range slices.Sorted(maps.Keys(c.Prom)) {
		if err := WriteProm(dir, m, c.Prom[m]); err != nil {
			return err
		}
	}
	seeds := make([]int, len(c.Seeds))
	for i, s := range c.Seeds {
		seeds[i] = s.Seed
	}
	return WriteMeta(dir, c, seeds, extra)
}

func TestWriteCellReadsBackAsWritten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cell")
	want := sampleCell()
	if err := writeCell(dir, want, map[string]any{"target": "http://127.0.0.1:8080", "workload": "published"}); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCell(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back\n%+v\nwrote\n%+v", got, want)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(leftovers) > 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

func TestWriteMetaListsOnlyTheSeedsDone(t *testing.T) {
	dir := t.TempDir()
	c := sampleCell()
	if err := WriteSeed(dir, c.Seeds[0]); err != nil {
		t.Fatal(err)
	}
	if err := WriteProm(dir, RunningMetric, c.Prom[RunningMetric]); err != nil {
		t.Fatal(err)
	}
	if err := WriteMeta(dir, c, []int{1}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCell(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Seeds) != 1 || got.Seeds[0].Seed != 1 {
		t.Fatalf("a cell stopped after seed 1 reads as seeds %v", got.Seeds)
	}
}

func TestWritersRefuseWhatLoadWouldRefuse(t *testing.T) {
	c := sampleCell()
	cases := []struct {
		name, want string
		write      func(dir string) error
	}{
		{"no arm", "no arm", func(dir string) error { c := c; c.Arm = ""; return WriteMeta(dir, c, nil, nil) }},
		{"zero rate", "rate 0", func(dir string) error { c := c; c.Rate = 0; return WriteMeta(dir, c, nil, nil) }},
		{"empty window", "window", func(dir string) error { c := c; c.End = c.Start; return WriteMeta(dir, c, nil, nil) }},
		{"reserved extra key", `"arm"`, func(dir string) error { return WriteMeta(dir, c, nil, map[string]any{"arm": "x"}) }},
		{"bad metric name", "not a metric name", func(dir string) error { return WriteProm(dir, "../x", nil) }},
		{"descending samples", "ascend", func(dir string) error {
			return WriteProm(dir, "m", []Series{{Instance: "a", T: []float64{2, 1}, V: []float64{1, 1}}})
		}},
		{"series without instance", "instance", func(dir string) error {
			return WriteProm(dir, "m", []Series{{T: []float64{1}, V: []float64{1}}})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write(t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestWriteSeedReplacesAWholeFile(t *testing.T) {
	dir := t.TempDir()
	c := sampleCell()
	if err := WriteSeed(dir, c.Seeds[0]); err != nil {
		t.Fatal(err)
	}
	short := Seed{Seed: 1, Requests: c.Seeds[0].Requests[:1]}
	if err := WriteSeed(dir, short); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "driver-seed1.csv"))
	if n := strings.Count(string(b), "\n"); n != 2 {
		t.Fatalf("the rewritten seed file has %d lines, want header + 1", n)
	}
}
