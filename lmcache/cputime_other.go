//go:build !linux

package lmcache

import "time"

// threadCPU is not available here: the pull loop's CPU budget does not apply.
func threadCPU() (time.Duration, bool) { return 0, false }
