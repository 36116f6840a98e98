package threadcpu

import (
	"runtime"
	"time"
)

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
