package extproc

import (
	"sync/atomic"
	"testing"
	"time"
)

// A stream's worker goroutine stays for the next stream: conversations one after another
// are served by fewer workers than streams, and every worker ends once it has been idle
// for workerIdle.
func TestWorkersServeLaterStreams(t *testing.T) {
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}})
	var started, ended atomic.Int32
	end := make(chan struct{}, 64)
	h.server.workerStart = func() { started.Add(1) }
	h.server.workerEnd = func() { ended.Add(1); end <- struct{}{} }
	const streams = 40
	for range streams {
		st, _ := h.route(t)
		if err := st.Send(respHeaders(true)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
		<-h.done
	}
	// Each stream came within workerIdle of the last one's end, unless the host stalled
	// the test for longer: allow for many such stalls, not for a worker per stream.
	if n := started.Load(); n < 1 || n > streams/4 {
		t.Fatalf("%d workers started for %d streams one after another, want 1 to %d", n, streams, streams/4)
	}
	deadline := time.After(10 * time.Second)
	for ended.Load() < started.Load() {
		select {
		case <-end:
		case <-deadline:
			t.Fatalf("%d of %d workers ended 10 s after the last stream, want all (idle %v)", ended.Load(), started.Load(), workerIdle)
		}
	}
}
