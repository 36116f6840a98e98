//go:build !linux

package picker

import "time"

// threadCPU is not available here: the benchmarks report wall-clock quantiles only.
func threadCPU() (time.Duration, bool) { return 0, false }

// threadFaults is not available here: the benchmarks report no page faults.
func threadFaults() (int64, bool) { return 0, false }
