//go:build !linux

// Package threadcpu reads the CPU time of the calling OS thread.
package threadcpu

import "time"

// Now is not available here: it returns 0 and false, and callers measure nothing.
func Now() (time.Duration, bool) { return 0, false }
