package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
		{"negative holdout", []string{"-holdout", "-1"}, "-holdout -1: draw 1..99 held-out profiles"},
		{"too many holdout", []string{"-holdout", "100"}, "-holdout 100: draw 1..99 held-out profiles"},
		{"holdout seed alone", []string{"-holdout-seed", "7"}, "-holdout-seed seeds a held-out draw: pass -holdout N too"},
		{"holdout with profiles", []string{"-holdout", "2", "-profiles", "rate20"}, "-holdout with -profiles, -workload or -trace"},
		{"holdout with a workload", []string{"-holdout", "2", "-workload", "b2b-saas-high-cache"}, "-holdout with -profiles, -workload or -trace"},
		{"holdout with an override", []string{"-holdout", "2", "-rate", "3"}, "-rate=3 with -holdout: a held-out profile's fleet and workload are drawn"},
		{"holdout with a ladder", []string{"-holdout", "2", "-ladder", "published"}, "-ladder with -holdout"},
		{"holdout with a bad arm", []string{"-holdout", "2", "-arms", "fastest"}, `-arms: arm "fastest"`},
		{"holdout seed not a number", []string{"-holdout", "2", "-holdout-seed", "x"}, `invalid value "x" for flag -holdout-seed`},
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

// tinyTrace writes a 6-request Mooncake trace over 5 s whose last prompt
// (33,000 tokens + 10) is longer than the tournament's context.
func tinyTrace(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 600, "output_length": 4, "hash_ids": [1, %d]}`+"\n", i*1000, 10+i)
	}
	ids := make([]string, 65)
	for i := range ids {
		ids[i] = strconv.Itoa(100 + i)
	}
	fmt.Fprintf(&b, `{"timestamp": 5000, "input_length": 33000, "output_length": 10, "hash_ids": [%s]}`+"\n", strings.Join(ids, ", "))
	path := filepath.Join(dir, "tiny-trace.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// -workload and -trace each run one profile named after the file: a
// workload file's seeds as given, a trace's seeds its windows, the capped
// prompts counted in the JSON and the report.
func TestTournamentRunsAWorkloadFileAndATrace(t *testing.T) {
	dir := t.TempDir()
	wl := filepath.Join(dir, "tiny-load.yaml")
	if err := os.WriteFile(wl, []byte("source: a test\nprofile: groups\nprompts-per-group: 3\nrequests: 12\nrate: 4\nprefixes: 4\nprefix-tokens: 256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		profile   string
		seeds     []uint64
		wantTrace bool
		report    []string
	}{
		{"workload file", []string{"-workload", wl, "-seeds", "1-2"}, "tiny-load", []uint64{1, 2}, false, []string{"## tiny-load", "12 requests per seed at 4 req/s, 4 groups x 3 prompts (a 256-token system prompt and a 34-token question each)"}},
		{"trace", []string{"-trace", tinyTrace(t, dir), "-windows", "2", "-engines", "2"}, "tiny-trace", []uint64{1, 2}, true,
			[]string{"## tiny-trace", "2 windows of", "6 requests in all", "1 prompts capped to the 32768-token context", "the trace's output tokens."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md, js := filepath.Join(dir, tt.profile+".md"), filepath.Join(dir, tt.profile+".json")
			var out, errOut bytes.Buffer
			args := append([]string{"tournament", "-arms", "kvaware,loadaware-b1", "-quiet", "-out", md, "-json", js}, tt.args...)
			if code := run(context.Background(), args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			raw, err := os.ReadFile(js)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Seeds    []uint64 `json:"seeds"`
				Profiles []struct {
					Name string `json:"name"`
					Arms []struct {
						Seeds []map[string]*float64 `json:"seeds"`
					} `json:"arms"`
					Trace *struct {
						Windows  int `json:"windows"`
						Requests int `json:"requests"`
						Capped   int `json:"capped_prompts"`
					} `json:"trace"`
				} `json:"profiles"`
			}
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			if len(doc.Profiles) != 1 || doc.Profiles[0].Name != tt.profile || !slices.Equal(doc.Seeds, tt.seeds) {
				t.Fatalf("seeds %v, profiles %+v: want the one profile %s on seeds %v", doc.Seeds, doc.Profiles, tt.profile, tt.seeds)
			}
			p := doc.Profiles[0]
			if len(p.Arms) != 2 || len(p.Arms[0].Seeds) != len(tt.seeds) || p.Arms[0].Seeds[0]["ttft_p95"] == nil {
				t.Errorf("arms %+v: want 2 arms with a TTFT p95 per seed", p.Arms)
			}
			if tt.wantTrace != (p.Trace != nil) || (p.Trace != nil && (p.Trace.Windows != 2 || p.Trace.Requests != 6 || p.Trace.Capped != 1)) {
				t.Errorf("trace %+v: want 2 windows, 6 requests, 1 capped (trace profile: %v)", p.Trace, tt.wantTrace)
			}
			report, err := os.ReadFile(md)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.report {
				if !strings.Contains(string(report), want) {
					t.Errorf("report has no %q", want)
				}
			}
		})
	}
}

func TestTournamentRefusesBadWorkloadAndTraceFlags(t *testing.T) {
	dir := t.TempDir()
	tr := tinyTrace(t, dir)
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rate: 4\nwarp: 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badTrace := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(badTrace, []byte(`{"timestamp": 0, "input_length": 0, "output_length": 4, "hash_ids": [1]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown workload key", []string{"-workload", bad}, `unknown key "warp"`},
		{"missing workload", []string{"-workload", filepath.Join(dir, "none.yaml")}, "not a shipped profile"},
		{"both sources", []string{"-workload", bad, "-trace", tr}, "-workload and -trace: pass one of them"},
		{"profiles with a file", []string{"-profiles", "novel", "-trace", tr}, "drop -profiles"},
		{"windows without a trace", []string{"-windows", "2"}, "pass -trace FILE too"},
		{"no windows", []string{"-trace", tr, "-engines", "2"}, "-windows 0: -trace needs the number of windows"},
		{"seeds with a trace", []string{"-trace", tr, "-windows", "2", "-seeds", "1-2"}, "a trace's seeds are its windows"},
		{"a user trace needs engines", []string{"-trace", tr, "-windows", "2"}, "pass -engines N"},
		{"an embedded trace sped up needs engines", []string{"-trace", "mooncake-synthetic", "-windows", "2", "-speedup", "4"}, "pass -engines N"},
		{"bad trace line", []string{"-trace", badTrace, "-windows", "2", "-engines", "2"}, "input_length 0"},
		{"more windows than the span", []string{"-trace", tr, "-windows", "9000", "-engines", "2"}, "pass fewer windows"},
		{"bad speed-up", []string{"-trace", tr, "-windows", "2", "-engines", "2", "-speedup", "0"}, "speed-up 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), append([]string{"tournament", "-out", filepath.Join(dir, "x.md")}, tt.args...), &out, &errOut)
			lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
			if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Fatalf("exit %d, stderr %q: want a failure on one line containing %q", code, errOut.String(), tt.want)
			}
		})
	}
}

func TestDriveRefusesTheGIEArm(t *testing.T) {
	if _, err := driveArms("kvaware,gie", true); err == nil || !strings.Contains(err.Error(), "only in virtual time") {
		t.Fatalf("error %v, want the gie arm refused as virtual-time only", err)
	}
}
