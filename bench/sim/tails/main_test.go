package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/experiment"
)

func row(engine string, ttft float64, cached, loaded int) experiment.Row {
	return experiment.Row{Engine: engine, TTFT: ttft, PromptTokens: 1579, CachedTokens: cached, LoadedTokens: loaded, Status: "ok"}
}

func TestClassNamesWhatTheEngineFound(t *testing.T) {
	tests := []struct {
		name string
		row  experiment.Row
		want string
	}{
		{"prefix in the GPU cache", row("a", 0.1, 1536, 0), classGPU},
		{"prefix loaded from the CPU tier", row("a", 0.1, 0, 1536), classLoad},
		{"GPU head, CPU tail", row("a", 0.1, 800, 736), classLoad},
		{"nothing found", row("a", 0.1, 0, 0), classRecompute},
		{"half the prefix recomputed", row("a", 0.1, 768, 0), classRecompute},
		{"one chunk recomputed is still a hit", row("a", 0.1, 1579-256, 0), classGPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := class(tt.row); got != tt.want {
				t.Fatalf("class = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBreakdownCountsTheTailPerSeed(t *testing.T) {
	arm := experiment.Arm{Name: "kvaware"}
	// Seed 1: the recompute is its slowest request; seed 2: a slow GPU hit on
	// engine b. Each seed's p95 of 20 requests sits between the slowest and the
	// rest, so exactly one request per seed is in the tail.
	fast := func(engine string) []experiment.Row {
		var rows []experiment.Row
		for range 19 {
			rows = append(rows, row(engine, 0.1, 1536, 0))
		}
		return rows
	}
	runs := []experiment.Run{
		{Arm: arm, Seed: 1, Rows: append(fast("a"), row("a", 0.9, 0, 0))},
		{Arm: arm, Seed: 2, Rows: append(fast("a"), row("b", 0.5, 1536, 0))},
		{Arm: arm, Seed: 3, Rows: []experiment.Row{{Engine: "a", TTFT: math.NaN(), Status: "error"}}},
	}
	got := breakdown(runs)
	if len(got) != 1 || got[0].Requests != 40 || got[0].Tail != 2 {
		t.Fatalf("breakdown %+v: want one arm, 40 finished requests, 2 in the tail", got)
	}
	want := []cell{
		{Engine: "a", Class: classGPU, Requests: 38, Tail: 0},
		{Engine: "a", Class: classRecompute, Requests: 1, Tail: 1},
		{Engine: "b", Class: classGPU, Requests: 1, Tail: 1},
	}
	if len(got[0].Cells) != len(want) {
		t.Fatalf("cells %+v, want %+v", got[0].Cells, want)
	}
	for i, w := range want {
		c := got[0].Cells[i]
		if c.Engine != w.Engine || c.Class != w.Class || c.Requests != w.Requests || c.Tail != w.Tail {
			t.Errorf("cell %d = %+v, want %+v", i, c, w)
		}
	}
	var b bytes.Buffer
	if err := write(&b, got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| kvaware | a | recompute | 2.5% | 0.900 | 50.0% | 0 |") {
		t.Fatalf("table misses the recompute row:\n%s", b.String())
	}
}

func TestRunRejectsUnknownArms(t *testing.T) {
	var b bytes.Buffer
	if err := run([]string{"-seeds", "1", "-arms", "fastest"}, &b); err == nil || !strings.Contains(err.Error(), "fastest") {
		t.Fatalf("err = %v, want one naming the unknown arm", err)
	}
}

func TestRunPrintsEveryRequestedArm(t *testing.T) {
	var b bytes.Buffer
	args := []string{"-seeds", "1", "-warmup", "0", "-requests", "40", "-arms", "kvaware,roundrobin", "-workers", "1"}
	if err := run(args, &b); err != nil {
		t.Fatal(err)
	}
	for _, arm := range []string{"| kvaware |", "| roundrobin |"} {
		if !strings.Contains(b.String(), arm) {
			t.Errorf("output has no %s row:\n%s", arm, b.String())
		}
	}
}
