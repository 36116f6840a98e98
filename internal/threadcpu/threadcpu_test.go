package threadcpu

import (
	"runtime"
	"testing"
	"time"
)

// TestNowCountsTheThreadsWork checks that a busy loop on a locked thread advances the
// reading by at least part of the wall time it took, and that the reading never goes back.
func TestNowCountsTheThreadsWork(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, ok := Now()
	if !ok {
		if runtime.GOOS == "linux" {
			t.Fatal("Now() = false on linux: CLOCK_THREAD_CPUTIME_ID should be readable")
		}
		t.Skip("no thread CPU clock on " + runtime.GOOS)
	}
	start := time.Now()
	x := 0
	for time.Since(start) < 20*time.Millisecond {
		x++
	}
	c1, _ := Now()
	if c1 < c0 {
		t.Fatalf("thread CPU went back: %v then %v", c0, c1)
	}
	if d := c1 - c0; d < 2*time.Millisecond {
		t.Fatalf("20 ms of busy loop (%d turns) read as %v of thread CPU; want at least 2 ms", x, d)
	}
}
