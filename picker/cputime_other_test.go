//go:build !linux

package picker

import "github.com/loadaware/loadaware-epp/internal/threadcpu"

// threadCPU is the calling OS thread's CPU time (threadcpu.Now: not available here).
var threadCPU = threadcpu.Now

// threadFaults is not available here: the benchmarks report no page faults.
func threadFaults() (int64, bool) { return 0, false }
