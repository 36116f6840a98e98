package main

import (
	"bytes"
	"context"
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
