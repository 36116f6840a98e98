package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/picker"
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
		{"help lists the commands", []string{"help"}, 0, "demo", ""},
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

func TestDemoRunsEndToEnd(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"-engines", "2", "-requests", "30", "-rate", "300", "-max-tokens", "2", "-samples", "1", "-progress=false"}
	if code := runDemo(context.Background(), args, &out, &errOut); code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	s := out.String()
	for _, want := range []string{`(?m)^\s*roundrobin\s+30\s+0\s`, `(?m)^\s*loadaware\s+30\s+0\s`,
		`returned to zero after every run: true`, `request \d+: policy=loadaware beta=1 winner=`} {
		if !regexp.MustCompile(want).MatchString(s) {
			t.Errorf("demo output does not match %q:\n%s", want, s)
		}
	}
}

func TestSumMetricAddsEveryLabelSet(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    float64
		wantErr bool
	}{
		{"labelled samples", "# HELP x y\nloadaware_inflight_requests{endpoint=\"a\",phase=\"decode\"} 2\nloadaware_inflight_requests{endpoint=\"a\",phase=\"prefill\"} 1\nother 9\n", 3, false},
		{"a metric with a longer name is not counted", "loadaware_inflight_requests_total 5\nloadaware_inflight_requests 1\n", 1, false},
		{"absent", "other 1\n", 0, true},
		{"unparsable value", "loadaware_inflight_requests x\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sumMetric(strings.NewReader(tc.text), "loadaware_inflight_requests")
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("sumMetric = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestPrefixIndexMirrorsAnLRUOfPrefixes(t *testing.T) {
	p := func(prefix, suffix uint32) []uint32 { return []uint32{prefix, prefix, prefix, suffix} }
	x := newPrefixIndex(2, 2)
	eps := []string{"a", "b"}
	match := func(tokens []uint32) []picker.CacheMatch {
		m, err := x.Match(context.Background(), tokens, eps)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	none := picker.CacheMatch{HolderRank: -1}
	if diff := cmp.Diff([]picker.CacheMatch{none, none}, match(p(1, 9))); diff != "" {
		t.Errorf("empty index (-want +got):\n%s", diff)
	}
	x.Routed("b", p(1, 7))
	x.Routed("a", p(1, 8))
	want := []picker.CacheMatch{{Matched: 3, HolderRank: 1}, {Matched: 3, HolderRank: 0}}
	if diff := cmp.Diff(want, match(p(1, 9))); diff != "" {
		t.Errorf("shared prefix, b stored it first (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]picker.CacheMatch{{Matched: 4, HolderRank: 1}, {Matched: 3, HolderRank: 0}}, match(p(1, 8))); diff != "" {
		t.Errorf("the same prompt matches whole on a (-want +got):\n%s", diff)
	}
	x.Routed("a", p(2, 1))
	x.Routed("a", p(3, 1)) // a holds two prefixes: 1 is evicted
	if diff := cmp.Diff([]picker.CacheMatch{none, {Matched: 3, HolderRank: 0}}, match(p(1, 9))); diff != "" {
		t.Errorf("after eviction on a (-want +got):\n%s", diff)
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
