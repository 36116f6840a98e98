package main

import (
	"bytes"
	"runtime"
	"runtime/trace"
	"strings"
	"testing"
	"time"

	xtrace "golang.org/x/exp/trace"
)

func TestOverlap(t *testing.T) {
	ss := []span{{10, 20}, {30, 40}, {50, 60}}
	for _, tc := range []struct {
		w    span
		want time.Duration
	}{
		{span{0, 5}, 0},
		{span{0, 10}, 0},
		{span{0, 15}, 5},
		{span{12, 18}, 6},
		{span{15, 35}, 10},
		{span{5, 65}, 30},
		{span{20, 30}, 0},
		{span{55, 100}, 5},
		{span{60, 70}, 0},
	} {
		if got := overlap(tc.w, ss); got != tc.want {
			t.Errorf("overlap(%v) = %v, want %v", tc.w, got, tc.want)
		}
	}
}

// spinMarked readies the goroutine waiting on ready, then works on the CPU for d without
// blocking: the goroutine tracestat is told to measure.
//
//go:noinline
func spinMarked(ready chan struct{}, d time.Duration) {
	close(ready)
	for start := time.Now(); time.Since(start) < d; {
	}
}

// At GOMAXPROCS 1, a goroutine readies another and then works 20 ms without blocking (Go
// preempts it after 10 ms): tracestat finds busy periods adding up to that, and the other
// goroutine's wait to run covered by them.
func TestReadFindsTheBusyPeriodsAndTheWaitTheyCover(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	const spin = 20 * time.Millisecond
	parked, ready, ran, done := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		close(parked)
		<-ready
		close(ran)
	}()
	<-parked // at GOMAXPROCS 1 the goroutine above now waits on ready
	go func() {
		spinMarked(ready, spin)
		close(done)
	}()
	<-ran
	<-done
	trace.Stop()
	st, err := read(&buf, "tracestat.spinMarked")
	if err != nil {
		t.Fatal(err)
	}
	if st.marked != 1 {
		t.Fatalf("marked goroutines = %d, want 1", st.marked)
	}
	var sum, longest time.Duration
	for _, s := range st.busy {
		d := time.Duration(s.b - s.a)
		sum, longest = sum+d, max(longest, d)
	}
	if sum < spin/2 || longest < spin/4 {
		t.Errorf("busy periods sum to %v, longest %v; want at least %v and %v", sum, longest, spin/2, spin/4)
	}
	var covered time.Duration
	for _, ws := range st.waits {
		for _, w := range ws {
			covered += overlap(w, st.busy)
		}
	}
	if covered < spin/4 {
		t.Errorf("the busy periods cover %v of the other goroutines' waits; want at least %v (the readied goroutine's)", covered, spin/4)
	}
	var out strings.Builder
	report(&out, st)
	if !strings.Contains(out.String(), "marked busy periods: n ") {
		t.Errorf("report lacks the busy periods' line:\n%s", out.String())
	}
}

func TestReadRefusesWhatIsNotATrace(t *testing.T) {
	if _, err := read(strings.NewReader("not a trace"), "x"); err == nil {
		t.Fatal("read of a text = nil error; want one")
	}
	var _ xtrace.GoID // the reader's package is the one the tool is built on
}
