package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func runCmd(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), args, &out, &errOut); code != 0 {
		t.Fatalf("%q exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSweepThenCompareThenReport(t *testing.T) {
	dir := t.TempDir()
	out, _ := runCmd(t, "sweep", "-arms", "kvaware,loadaware-b1,roundrobin", "-seeds", "1-4", "-requests", "80", "-out", dir, "-csv=false", "-progress=false")
	if !strings.Contains(out, "12 runs (3 arms x 4 seeds x 80 requests; published protocol") {
		t.Errorf("sweep output: %s", out)
	}
	report := readFile(t, filepath.Join(dir, "REPORT.md"))
	seeds := readFile(t, filepath.Join(dir, "seeds.csv"))

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"imbalance, flags after the arms", []string{"compare", "loadaware-b1", "kvaware", "-dir", dir, "-metric", "imbalance"},
			[]string{"loadaware-b1 vs kvaware on imbalance (lower is better), 4 paired seeds", "median relative reduction:", "one-sided exact Wilcoxon signed-rank", "n = "}},
		{"a higher-is-better metric", []string{"compare", "-dir", dir, "-metric", "req_per_s", "kvaware", "roundrobin"},
			[]string{"on req/s (higher is better)", "median relative increase:", "(H1: kvaware is higher)"}},
		{"the table name of a metric", []string{"compare", "-dir", dir, "-metric", "TTFT p95", "roundrobin", "kvaware"},
			[]string{"roundrobin vs kvaware on TTFT p95 (lower is better)", " of 4\n", "significant at alpha 0.025: "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _ := runCmd(t, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("compare output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	// The relative increase of a higher-is-better metric agrees in sign with the medians.
	out, _ = runCmd(t, "compare", "-dir", dir, "-metric", "req_per_s", "kvaware", "roundrobin")
	m := regexp.MustCompile(`median over seeds: kvaware ([0-9.]+), roundrobin ([0-9.]+)`).FindStringSubmatch(out)
	inc := regexp.MustCompile(`median relative increase: ([+-])`).FindStringSubmatch(out)
	if m == nil || inc == nil || (parseF(t, m[1]) > parseF(t, m[2])) != (inc[1] == "+") {
		t.Errorf("the increase's sign disagrees with the medians:\n%s", out)
	}

	for _, bad := range [][]string{
		{"compare", "-dir", dir, "kvaware"},
		{"compare", "-dir", dir, "-metric", "speed", "kvaware", "roundrobin"},
		{"report"},
	} {
		var o, e bytes.Buffer
		if code := run(context.Background(), bad, &o, &e); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage)", bad, code)
		}
	}
	var o, e bytes.Buffer
	if code := run(context.Background(), []string{"compare", "-dir", dir, "leastload", "kvaware"}, &o, &e); code != 1 || !strings.Contains(e.String(), `arm "leastload": no runs`) {
		t.Errorf("unknown arm: exit %d, %s", code, e.String())
	}

	if err := os.Remove(filepath.Join(dir, "REPORT.md")); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "report", dir)
	if got := readFile(t, filepath.Join(dir, "REPORT.md")); got != report {
		t.Errorf("report regenerated a different REPORT.md:\n%s", cmp.Diff(report, got))
	}
	if got := readFile(t, filepath.Join(dir, "seeds.csv")); got != seeds {
		t.Error("report regenerated a different seeds.csv")
	}
}

func TestLiveCommandReportsLiveAndVirtualTime(t *testing.T) {
	dir := t.TempDir()
	out, _ := runCmd(t, "live", "-arms", "loadaware-b1", "-seeds", "2", "-requests", "30", "-rate", "40", "-warmup", "100", "-max-tokens", "4",
		"-slowdowns", "0.065,0.05", "-out", dir, "-progress=false")
	for _, want := range []string{`(?m)^\s*loadaware-b1\s+2\s+live\s`, `(?m)^\s*loadaware-b1\s+2\s+virtual time\s`, `1 live runs in`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("live output does not match %q:\n%s", want, out)
		}
	}
	report := readFile(t, filepath.Join(dir, "REPORT.md"))
	for _, want := range []string{"# Benchmark report: the published experiment, live\n", "**Live mode**", "## Live against virtual time", "| loadaware-b1 | 2 | virtual time |"} {
		if !strings.Contains(report, want) {
			t.Errorf("REPORT.md lacks %q", want)
		}
	}
	runCmd(t, "report", dir)
	if got := readFile(t, filepath.Join(dir, "REPORT.md")); got != report {
		t.Errorf("report regenerated a different live REPORT.md:\n%s", cmp.Diff(report, got))
	}
}

func TestDemoIsTheLiveDemo(t *testing.T) {
	// The published warm-up stores every prefix on the engine that first
	// serves it, and LMCache saves nothing more for prompts it finds: a short
	// kvaware seed sends no ZeroMQ traffic. A warm-up of 100 random requests
	// leaves prefixes for the live seed to store.
	out, _ := runCmd(t, "demo", "-requests", "24", "-rate", "40", "-max-tokens", "4", "-warmup", "100", "-samples", "1", "-vtime-seeds", "3", "-progress=false")
	for _, want := range []string{`(?m)^\s*engine 1 \([\d.]+x slower steps\)\s+\d+\s+\d+\s+\d+\s+\d+\s*$`, `warmed up with 100 requests`, `(?m)^\s*kvaware\s+\S+\s+\S+.*\s(\d+)/(\d+)\s+\S+\s*$`,
		`loadaware-b1\s+request \d+: policy=loadaware beta=1 winner=127\.0\.1\.\d+:\d+ reason=\S+ prompt_tokens=1579 tokens=request; candidates: .*matched=`,
		`latencyaware\s+request \d+: policy=latencyaware beta=1 winner=\S+ reason=\S+ .* load=[\d.]+ affinity=[\d.]+`,
		`ttftaware\s+request \d+: policy=ttftaware winner=\S+ reason=\S+ .* est_ttft=[\d.]+ queued=[\d.]+ queued_full=[\d.]+ drain=[\d.]+ kv_wait=[\d.]+`,
		`The same arms on seeds 1-3 of this workload in virtual time`, `loadaware-b1 vs kvaware, imbalance: median reduction`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("demo output does not match %q:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`(?m)^\s*loadaware-b1(?:\s+\S+){6}\s+0\s+(\d+)/(\d+)\s`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] || m[1] == "0" {
		t.Errorf("LMCache messages pushed/received not equal and positive:\n%s", out)
	}
}

func parseF(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return v
}
