package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTournamentRefusesBadFlagsInOneLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown profile", []string{"-profiles", "huge"}, `-profiles: unknown profile "huge": use published, rate20`},
		{"empty profiles", []string{"-profiles", ","}, "-profiles is empty: use all or any of published"},
		{"unknown arm", []string{"-arms", "fastest"}, `-arms: arm "fastest": unknown policy "fastest": use one of loadaware`},
		{"arm twice", []string{"-arms", "kvaware,kvaware"}, "-arms: arm kvaware named twice"},
		{"bad seeds", []string{"-seeds", "5-1"}, `-seeds "5-1": a range is A-B with A <= B`},
		{"no workers", []string{"-workers", "0"}, "-workers 0: use 1 or more"},
		{"bad sample interval", []string{"-sample-interval", "0s"}, "-sample-interval 0s: use a positive duration"},
		{"bad override", []string{"-rate", "-1"}, "-rate -1: need a positive finite rate"},
		{"bad slowdowns", []string{"-slowdowns", "1,x"}, `-slowdowns: "x" is not a number`},
		{"too many slowdowns for a profile", []string{"-profiles", "rate20", "-slowdowns", "1,1,1"}, "-slowdowns: 3 factors for 2 engines"},
		{"published seed not measured", []string{"-profiles", "published", "-seeds", "21", "-requests", "5", "-quiet"}, "not seed 21"},
		{"empty out", []string{"-out", ""}, "-out is empty"},
		{"unknown flag", []string{"-fast"}, "flag provided but not defined: -fast"},
		{"not a number", []string{"-workers", "two"}, `invalid value "two" for flag -workers`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"tournament"}, tt.args...)
			code := run(context.Background(), args, &out, &errOut)
			lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
			if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Fatalf("exit %d, stderr %q: want a failure on one line containing %q", code, errOut.String(), tt.want)
			}
		})
	}
}

func TestTournamentHelpListsTheProfilesAndOverrides(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"tournament", "-h"}, &out, &errOut); code != 0 {
		t.Fatalf("-h exited %d", code)
	}
	for _, want := range []string{"usage: loadaware-bench tournament", "published, rate20", "-burst-every", "-slowdowns", "-kv-pool-tokens"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("help has no %q", want)
		}
	}
}

// A short slice of the tournament through the command: the report, its figure and the
// JSON are written, the overrides reach every selected profile, and the report names them.
func TestTournamentCommandWritesReportFigureAndJSON(t *testing.T) {
	dir := t.TempDir()
	md, js := filepath.Join(dir, "out", "t.md"), filepath.Join(dir, "out", "t.json")
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"tournament", "-profiles", "rate20,novel", "-arms", "kvaware,loadaware-b1", "-seeds", "1-2",
		"-requests", "25", "-workers", "2", "-quiet", "-out", md, "-json", js}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if errOut.Len() != 0 {
		t.Errorf("-quiet wrote %q on stderr", errOut.String())
	}
	if !strings.Contains(out.String(), "4 cells (2 profiles x 2 arms x 2 seeds)") {
		t.Errorf("stdout %q", out.String())
	}
	report, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## rate20", "## novel", "25 requests per seed at 20 req/s", "![", "(t.png)", "[`t.json`](t.json)"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report has no %q", want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "out", "t.png")); err != nil || fi.Size() == 0 {
		t.Errorf("figure: %v", err)
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Profiles []struct {
			Name string
			Arms []struct {
				Arm   string
				Seeds []map[string]any
			}
		}
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Profiles) != 2 || len(doc.Profiles[0].Arms) != 2 || len(doc.Profiles[0].Arms[0].Seeds) != 2 {
		t.Fatalf("JSON shape %+v", doc)
	}
}
