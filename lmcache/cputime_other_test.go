//go:build !linux

package lmcache

import "time"

// threadCPU is not available here: the benchmarks report wall-clock quantiles only.
func threadCPU() (time.Duration, bool) { return 0, false }

func processCPU() (time.Duration, bool) { return 0, false }
