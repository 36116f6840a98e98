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
)

// TestMain lets the test binary serve as extload's server process: extload starts
// os.Executable (here, this binary) with extloadChildEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(extloadChildEnv) != "" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestExtloadReportsEveryServerAndTheRatios(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	var out, errOut bytes.Buffer
	flights := t.TempDir()
	// Every window's longest round trip is over 1ns: each is a stall, and each server's and
	// the generator's flight recordings are written after it.
	args := []string{"-rates", "200,300", "-rounds", "3", "-duration", "100ms", "-warmup", "50ms", "-progress=false", "-body-bytes", "2048",
		"-stall", "1ns", "-server-flight", flights}
	if code := run(context.Background(), append([]string{"extload"}, args...), &out, &errOut); code != 0 {
		t.Fatalf("extload exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	s := out.String()
	for _, want := range []string{
		`(?m)^(pinned: each server process on CPU \d+ alone, the generator on CPU\(s\) \[[\d ]+\] with GOMAXPROCS \d+|not pinned: this process may use only CPU \[\d+\]).*$`,
		`(?m)^\s*rate/s\s+server\s+sent\s+shed\s+failed\s+routed\s+round trip p50 ms\s+p99\s+p99\.9\s+request phase p50 ms\s+p99\s+CPU/request µs\s+GC CPU/request µs\s+GCs/s\s+alloc KB/request\s+generator CPU/request µs\s+generator load$`,
		`(?m)^\s*200\s+do-nothing\s+\d+\s+0\s+0\s+0(\s+[\d.]+){9}\s+[\d.]+\s+\d+%$`,
		`(?m)^\s*200\s+loadaware-epp\s+(\d+)\s+0\s+0\s+(\d+)\s+[\d.]+`,
		`(?m)^\s*200\s+pass-through\s+\d+\s+0\s+0\s+0\s+[\d.]+`,
		`(?m)^\s*300\s+do-nothing\s`,
		`(?m)^\s*300\s+pass-through\s`,
		`(?m)^\s*300\s+loadaware-epp\s`,
		// One comparison table per floor, do-nothing first, each with both rates.
		// Three rounds: each rate has the p99 ratio's interval and its verdict.
		`(?s)loadaware-epp against do-nothing, same run:\n\s*rate/s\s+p50 ratio\s+p99 ratio\s+p99 <= 1\.3x\s+p99 ratio 90% CI\s+CI within\s+CPU/request ratio\s+extra CPU/request µs\s+extra <= 100µs\n` +
			`\s*200\s+[\d.]+\s+[\d.]+\s+(true|false)\s+[\d.]+-[\d.]+\s+(yes|no|unclear)\s+[\d.]+\s+-?[\d.]+\s+(true|false)\n` +
			`\s*300\s+[\d.]+\s+[\d.]+\s+(true|false)\s+[\d.]+-[\d.]+\s+(yes|no|unclear)\s+[\d.]+\s+-?[\d.]+\s+(true|false)\n` +
			`\nloadaware-epp against pass-through, same run:\n\s*rate/s\s+p50 ratio.*\n\s*200\s+[\d.]+\s+[\d.]+\s+(true|false)\s.*\n\s*300\s+[\d.]+\s+[\d.]+\s+(true|false)\s`,
	} {
		if !regexp.MustCompile(want).MatchString(s) {
			t.Errorf("report does not match %q:\n%s", want, s)
		}
	}
	// One line per server and rate in the windows table: three windows, each with a stall.
	for _, server := range []string{"do-nothing", "pass-through", "loadaware-epp"} {
		for _, rate := range []string{"200", "300"} {
			if !regexp.MustCompile(`(?m)^` + rate + `\s+` + server + `\s+3\s+[\d.]+\s+3\s+[\d.]+ \(\d\)`).MatchString(s) {
				t.Errorf("no windows line for %s at %s/s with three stalls:\n%s", server, rate, s)
			}
		}
	}
	// 3 servers x 2 rates x 3 rounds, a server's and the generator's recording for each.
	files, err := os.ReadDir(flights)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 36 {
		t.Errorf("%d flight recordings in %s, want 36", len(files), flights)
	}
	for _, name := range []string{"loadaware-epp-300-round002.trace", "generator-do-nothing-200-round000.trace"} {
		if fi, err := os.Stat(filepath.Join(flights, name)); err != nil || fi.Size() == 0 {
			t.Errorf("flight recording %s: %v (want a non-empty trace)", name, err)
		}
	}
	// Every request to the picker was routed: its sent and routed columns agree.
	m := regexp.MustCompile(`(?m)^\s*200\s+loadaware-epp\s+(\d+)\s+0\s+0\s+(\d+)\s`).FindStringSubmatch(s)
	if m == nil || m[1] != m[2] || m[1] == "0" {
		t.Errorf("the picker's row should show every request sent and routed: %q", m)
	}
}

func TestExtloadFeedsThePickerLMCacheEventsWithoutLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	var out, errOut bytes.Buffer
	args := []string{"-rates", "200", "-rounds", "2", "-duration", "150ms", "-warmup", "50ms", "-progress=false", "-body-bytes", "2048",
		"-lmcache-rate", "400", "-lmcache-batch", "4"}
	if code := run(context.Background(), append([]string{"extload"}, args...), &out, &errOut); code != 0 {
		t.Fatalf("extload exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	s := out.String()
	if !strings.Contains(s, "LMCache ingestion: an engine's worker pushes 400 batches/s of 4 KV admit events (new keys) to the picker's controller during its windows.") {
		t.Errorf("the report's heading does not say what is fed:\n%s", s)
	}
	if !regexp.MustCompile(`The feeder's process used [\d.]+ µs of CPU per batch pushed`).MatchString(s) || !strings.Contains(s, "the worker runs in a process of its own") {
		t.Errorf("the report does not say where the feeder ran and what it used:\n%s", s)
	}
	m := regexp.MustCompile(`LMCache ingestion: (\d+) batches \((\d+) KV admit events\) pushed to the picker during its windows, (\d+) batches refused by the socket at once \(dropped\); the picker applied (\d+) admits and ignored (\d+)\.`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no ingestion line in the report:\n%s", s)
	}
	n := make([]int, 5)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	// Two windows of 200ms at 400/s: about 160 batches; every event pushed is applied.
	if n[0] < 40 || n[1] != 4*n[0] || n[2] != 0 || n[3] != n[1] || n[4] != 0 {
		t.Errorf("batches %d, events %d, dropped %d, applied %d, ignored %d: want every pushed event applied\n%s", n[0], n[1], n[2], n[3], n[4], s)
	}
}

func TestExtloadRefusesBadFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"a rate that is not a number", []string{"-rates", "500,fast"}, `"fast" is not a positive number`},
		{"a zero rate", []string{"-rates", "0"}, "not a positive number"},
		{"no window", []string{"-duration", "0s"}, "-duration 0s"},
		{"no rounds", []string{"-rounds", "0"}, "-rounds 0: pass 1 to 1000"},
		{"a tiny body", []string{"-body-bytes", "10"}, "-body-bytes 10: pass 64"},
		{"an unknown prompt form", []string{"-prompt", "audio"}, `-prompt "audio": use ids or text`},
		{"no endpoints", []string{"-endpoints", "0"}, "-endpoints 0"},
		{"no streams allowed", []string{"-max-inflight", "0"}, "-max-inflight 0"},
		{"a zero GOGC", []string{"-server-gc-percent", "0"}, "-server-gc-percent 0: use a GOGC of at least 1"},
		{"no stall length", []string{"-stall", "0s"}, "-stall 0s: pass a positive duration"},
		{"a negative memory limit", []string{"-server-memory-limit", "-5"}, "-server-memory-limit -5: pass a limit in bytes, or 0 for none"},
		{"a negative LMCache rate", []string{"-lmcache-rate", "-1"}, "-lmcache-rate -1: pass 0 (none) to 100000 batches/s"},
		{"an LMCache batch over LMCache's", []string{"-lmcache-rate", "10", "-lmcache-batch", "51"}, "-lmcache-batch 51: pass 1 to 50 events"},
		{"an empty LMCache batch", []string{"-lmcache-batch", "0"}, "-lmcache-batch 0: pass 1 to 50"},
		{"a stray argument", []string{"500"}, `unexpected argument "500"`},
		{"an unknown flag", []string{"-nope"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(context.Background(), append([]string{"extload"}, tt.args...), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tt.wantErr) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), tt.wantErr)
			}
		})
	}
}

func TestExtloadSaysWhenItCannotKeepRecordings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	args := []string{"-server-flight", filepath.Join(file, "flights"), "-rates", "100", "-duration", "10ms", "-progress=false"}
	if code := run(context.Background(), append([]string{"extload"}, args...), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "pass a directory this user can create or write") {
		t.Fatalf("exit %d, stderr %q; want 1 and what to pass", code, errOut.String())
	}
}
