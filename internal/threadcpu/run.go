package threadcpu

import (
	"runtime"
	"time"
)

// Of runs f kept to its OS thread and returns the CPU time the thread used meanwhile, and
// true; where the clock cannot be read it runs f and returns 0 and false. What f waits for
// (a network reply, a lock) is not counted, only what its thread did.
func Of(f func()) (time.Duration, bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, ok := Now()
	f()
	c1, _ := Now()
	if !ok || c1 < c0 {
		return 0, false
	}
	return c1 - c0, true
}

// Spin keeps the calling goroutine on its OS thread and busies the thread until it has used
// d of CPU time (work of a known CPU cost, for tests and benchmarks), and returns true. Where
// the thread CPU clock cannot be read it returns false at once, having done nothing.
func Spin(d time.Duration) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, ok := Now()
	if !ok {
		return false
	}
	for {
		if c, _ := Now(); c-c0 >= d {
			return true
		}
	}
}
