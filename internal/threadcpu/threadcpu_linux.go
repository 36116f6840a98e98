//go:build linux

// Package threadcpu reads the CPU time of the calling OS thread.
package threadcpu

import (
	"syscall"
	"time"
	"unsafe"
)

// Now returns the CPU time the calling OS thread has used (CLOCK_THREAD_CPUTIME_ID), and
// true. Unlike the wall clock it does not count the time the kernel gave other threads and
// processes, the bulk of a tail on a shared machine. Two readings measure the work between
// them only if the goroutine kept to its thread (runtime.LockOSThread).
func Now() (time.Duration, bool) {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
