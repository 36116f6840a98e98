package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyLadderFile writes a small workload file with a published ladder far
// past two engines' capacity.
func tinyLadderFile(t *testing.T, dir string, ladder string) string {
	t.Helper()
	path := filepath.Join(dir, "tiny-ladder.yaml")
	body := "source: a test\nprofile: novel\nrequests: 12\nrate: 2\n" + ladder
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// -ladder published measures the capacity, scales the file's ladder to it
// and writes the knee report, its figure and the JSON (one profile per rate).
func TestTournamentLadderWritesTheKneeReport(t *testing.T) {
	dir := t.TempDir()
	wl := tinyLadderFile(t, dir, "ladder: [100, 200, 400]\n")
	md, js := filepath.Join(dir, "k.md"), filepath.Join(dir, "k.json")
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"tournament", "-workload", wl, "-ladder", "published", "-arms", "kvaware,leastload", "-seeds", "1",
		"-quiet", "-out", md, "-json", js}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "ladder of 3 rates x 2 arms x 1 seeds") {
		t.Errorf("stdout %q", out.String())
	}
	report, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Knee: tiny-ladder", "**The published ladder (100, 200, 400 req/s) exceeds this fleet's capacity**", "| offered req/s | published | kvaware TTFT p90 (s) |",
		"`leastload` offered 400 req/s", "| arm | TTFT p90 floor (s) | knee (req/s) |", "(k.png)", "(k.json)"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report has no %q:\n%s", want, report)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "k.png")); err != nil || fi.Size() == 0 {
		t.Errorf("figure: %v", err)
	}
	if data, err := os.ReadFile(js); err != nil || strings.Count(string(data), `"name":"tiny-ladder@`) != 3 {
		t.Errorf("JSON: %v: want 3 profiles named tiny-ladder@<rate>", err)
	}
}

func TestTournamentRefusesBadLadders(t *testing.T) {
	dir := t.TempDir()
	with := tinyLadderFile(t, dir, "")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no workload", []string{"-ladder", "published"}, "-ladder runs one workload's rates: pass -workload"},
		{"no ladder key", []string{"-workload", with, "-ladder", "published"}, "has no ladder key"},
		{"descending", []string{"-workload", with, "-ladder", "2,1"}, `-ladder "2,1": use published or ascending positive rates`},
		{"not numbers", []string{"-workload", with, "-ladder", "fast"}, `-ladder "fast"`},
		{"zero", []string{"-workload", with, "-ladder", "0,1"}, `-ladder "0,1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), append([]string{"tournament", "-quiet", "-arms", "kvaware", "-seeds", "1"}, tt.args...), &out, &errOut)
			lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
			if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Fatalf("exit %d, stderr %q: want a failure on one line containing %q", code, errOut.String(), tt.want)
			}
		})
	}
}
