package lmcache

import (
	"runtime"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestIngestBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := newIngestBudget(0.25, 10*time.Millisecond, t0) // a quarter of a CPU, 10 ms at once
	for i, step := range []struct {
		name string
		at   time.Duration
		cpu  time.Duration
		wait time.Duration
	}{
		{"the burst is free", 0, 10 * time.Millisecond, 0},
		{"1 ms of debt is 4 ms of pause at a quarter", 0, time.Millisecond, 4 * time.Millisecond},
		{"the pause repaid it", 4 * time.Millisecond, 0, 0},
		{"a long spell of debt pauses at most maxIngestWait", 4 * time.Millisecond, 100 * time.Millisecond, maxIngestWait},
		{"the debt is still owed after one pause", 4*time.Millisecond + maxIngestWait, 0, maxIngestWait},
		{"and repaid at the rate", 404 * time.Millisecond, 0, 0},
		{"an idle hour refills only the burst", time.Hour, 10 * time.Millisecond, 0},
		{"beyond it, debt again", time.Hour, 2 * time.Millisecond, 8 * time.Millisecond},
	} {
		if got := g.charge(step.cpu, t0.Add(step.at)); got != step.wait {
			t.Errorf("step %d (%s): charge(%v) at %v paused %v, want %v", i, step.name, step.cpu, step.at, got, step.wait)
		}
	}
	if g := newIngestBudget(-1, time.Millisecond, t0); g != nil || g.charge(time.Hour, t0) != 0 {
		t.Errorf("no budget (negative share): %v", g)
	}
}

// A flooding peer under a small CPU budget is paused (counted, logged once), and every
// event it sent is applied all the same: pausing backs the senders up, it drops nothing.
func TestServerPacesIngestionToItsCPUBudget(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the pull loop's CPU clock is read on Linux only")
	}
	noLeaks(t)
	ls := startServer(t, ServerConfig{Allow: AllowAny, PeerRate: -1, IngestCPU: 0.01, IngestCPUBurst: time.Millisecond}, nil)
	push := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
	const batches, perBatch = 100, 50
	for i := range batches {
		var msgs []Message
		for j := range perBatch {
			msgs = append(msgs, KVAdmitMsg{InstanceID: "flood", Key: int64(i*perBatch + j + 1), Location: "cpu"})
		}
		if _, err := push.SendMessage(encodeAll(t, msgs)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every admit applied", func() bool { return ls.idx.Keys() == batches*perBatch })
	if p := testutil.ToFloat64(ls.ingestPaused); p <= 0 {
		t.Errorf("the pull loop never paused (paused %v s, used %v s of CPU)", p, testutil.ToFloat64(ls.ingestCPU))
	}
	if c := testutil.ToFloat64(ls.ingestCPU); c <= 0 {
		t.Errorf("no ingestion CPU counted: %v", c)
	}
	if n := strings.Count(ls.logs.String(), "used its CPU budget"); n != 1 {
		t.Errorf("the over-budget line was logged %d times, want once:\n%s", n, ls.logs.String())
	}
	push.Close()
	ls.closePeers(t)
}
