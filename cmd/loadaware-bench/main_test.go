package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRunDispatchesSubcommands(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"no command prints usage", nil, 2, "", "usage: loadaware-bench"},
		{"help lists the commands", []string{"help"}, 0, "  demo        a short live run", ""},
		{"no command is registered under a second name", []string{"demo-live"}, 2, "", `unknown command "demo-live"`},
		{"the simple-engine demo is gone", []string{"demo-simple"}, 2, "", `unknown command "demo-simple"`},
		{"unknown command", []string{"fly"}, 2, "", `unknown command "fly"`},
		{"bad flag", []string{"demo", "-nope"}, 2, "", "flag provided but not defined"},
		{"invalid value", []string{"demo", "-requests", "0"}, 1, "", "must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errOut)
			if code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) || !strings.Contains(errOut.String(), tc.wantErr) {
				t.Errorf("run(%q) = %d, stdout %q, stderr %q", tc.args, code, out.String(), errOut.String())
			}
		})
	}
}

func TestGWLoadReportsEveryStep(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"-rates", "50,100", "-duration", "200ms", "-sequential", "20", "-prompt", "ids"}
	if code := runGWLoad(context.Background(), args, &out, &errOut); code != 0 {
		t.Fatalf("gwload exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{`(?m)^\s*sequential\s+20\s+0\s`, `(?m)^\s*50 req/s\s+\d+\s+0\s`, `(?m)^\s*100 req/s\s+\d+\s+0\s`,
		`in-flight count at the end: 0\.`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("gwload output does not match %q:\n%s", want, out.String())
		}
	}
}

func TestCompletionBodyHasTheAskedSize(t *testing.T) {
	for _, ids := range []bool{false, true} {
		for _, n := range []int{64, 1000, 8192} {
			b := completionBody(n, ids)
			var v struct {
				Prompt json.RawMessage `json:"prompt"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if len(b) < n || len(b) > n+16 {
				t.Errorf("completionBody(%d, ids=%v) has %d bytes", n, ids, len(b))
			}
			if isIDs := v.Prompt[0] == '['; isIDs != ids {
				t.Errorf("completionBody(%d, ids=%v) prompt starts %q", n, ids, v.Prompt[:1])
			}
		}
	}
}

func TestParseRates(t *testing.T) {
	tests := []struct {
		in      string
		want    []float64
		wantErr bool
	}{
		{"500,1000", []float64{500, 1000}, false},
		{" 250 ", []float64{250}, false},
		{"0", nil, true},
		{"fast", nil, true},
		{"", nil, true},
	}
	for _, tc := range tests {
		got, err := parseRates(tc.in)
		if (err != nil) != tc.wantErr || !cmp.Equal(got, tc.want) {
			t.Errorf("parseRates(%q) = %v, %v", tc.in, got, err)
		}
	}
}
