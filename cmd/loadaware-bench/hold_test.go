package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/promtext"
	"github.com/loadaware/loadaware-epp/internal/testlog"
)

// decisions sums loadaware_decisions_total on the metrics page at url.
func decisions(t *testing.T, url string) float64 {
	t.Helper()
	p, err := promtext.Get(context.Background(), http.DefaultClient, url)
	if err != nil {
		t.Fatal(err)
	}
	return p.Sum("loadaware_decisions_total")
}

// startHeldDemo runs a short demo with -hold until it prints its hold message, and returns
// what it printed so far and its exit code's channel; cancelling ctx stops it.
func startHeldDemo(ctx context.Context, t *testing.T) (out *testlog.Buffer, errOut *bytes.Buffer, code chan int) {
	t.Helper()
	out = &testlog.Buffer{}
	held := out.Seen("  Grafana:")
	errOut = &bytes.Buffer{}
	code = make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"demo", "-arms", "loadaware-b1", "-requests", "8", "-rate", "40", "-max-tokens", "4",
			"-warmup", "50", "-samples", "0", "-vtime-seeds", "0", "-progress=false", "-hold"}, out, errOut)
	}()
	select {
	case <-held:
	case c := <-code:
		t.Fatalf("demo -hold ended (exit %d) without holding:\n%s\n%s", c, out.String(), errOut.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("demo -hold printed no hold message within 2 minutes:\n%s", out.String())
	}
	return out, errOut, code
}

// TestDemoHoldKeepsThePickerUp runs the demo with -hold: it prints the metrics URL, keeps
// the picker serving traffic sent to the printed gateway, and exits cleanly on interrupt.
func TestDemoHoldKeepsThePickerUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut, code := startHeldDemo(ctx, t)
	s := out.String()
	started := regexp.MustCompile(`loadaware-b1: the picker's metrics are at (http://\S+/metrics) while its requests run`).FindStringSubmatch(s)
	held := regexp.MustCompile(`(?m)^  metrics:  (http://\S+/metrics)\n  gateway:  (http://\S+) `).FindStringSubmatch(s)
	if started == nil || held == nil || started[1] != held[1] {
		t.Fatalf("demo output lacks the metrics URL at the start and in the hold message:\n%s", s)
	}
	if !strings.Contains(s, "Requests per engine:") {
		t.Errorf("the results were not printed before holding:\n%s", s)
	}
	before := decisions(t, held[1])
	if before < 8 {
		t.Errorf("the held picker counts %v decisions, want the run's 8 at least", before)
	}
	resp, err := http.Post(held[2]+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":[1,2,3],"max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a request through the held gateway: %d", resp.StatusCode)
	}
	if after := decisions(t, held[1]); after != before+1 {
		t.Errorf("decisions %v after one more request, want %v", after, before+1)
	}
	stopHeldDemo(t, cancel, code, errOut)
}

// stopHeldDemo interrupts a demo started by startHeldDemo (cancel is its context's) and
// fails t unless it exits 0 within a minute.
func stopHeldDemo(t *testing.T, cancel context.CancelFunc, code chan int, errOut *bytes.Buffer) {
	t.Helper()
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("demo -hold exit %d after the interrupt:\n%s", c, errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("demo -hold did not stop within a minute of the interrupt")
	}
}
