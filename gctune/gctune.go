// Package gctune chooses the Go collector's settings for a picker process (decision 1116).
// A picker allocates per request (gRPC messages, the body, the answer) and holds a small
// live heap, so at Go's default GOGC=100 it collects many times a second, and each cycle
// costs CPU and tail latency. Under a memory limit the collector can run less often and let
// the limit, not the heap's growth, bound memory: the Go runtime then collects harder as the
// heap nears the limit.
//
// Plan is pure; CgroupMemoryMax and Apply are the effects.
package gctune

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the GOGC a picker runs with under a memory limit.
const DefaultGCPercent = 400

// LimitShare is the part of the container's memory given to the Go runtime's soft limit;
// the rest is for what the runtime does not count (thread stacks outside the heap, cgo's
// libzmq) and for slack.
const LimitShare = 0.9

// Settings are what Apply sets. A zero field is left as the runtime has it.
type Settings struct {
	GCPercent   int   // GOGC; 0: unchanged
	MemoryLimit int64 // bytes; 0: unchanged
	Why         string
}

// Plan decides the settings. GOGC and GOMEMLIMIT in the environment are the operator's and
// are left alone (the runtime has applied them). memoryLimit is --memory-limit: bytes, 0 for
// LimitShare of cgroupMax (the container's memory limit; 0 when there is none), or -1 for
// no limit. gcPercent (--gc-percent) is applied only under a limit, from whichever source:
// without one, a heap allowed to grow to five times its live size could outgrow the machine.
func Plan(getenv func(string) string, cgroupMax int64, gcPercent int, memoryLimit int64) Settings {
	var s Settings
	limit, source := int64(0), ""
	switch {
	case getenv("GOMEMLIMIT") != "":
		source = "GOMEMLIMIT=" + getenv("GOMEMLIMIT") + " from the environment"
	case memoryLimit > 0:
		limit, source = memoryLimit, "--memory-limit"
	case memoryLimit == 0 && cgroupMax > 0:
		limit = int64(float64(cgroupMax) * LimitShare)
		source = fmt.Sprintf("%.0f%% of the container's %s", LimitShare*100, bytesText(cgroupMax))
	}
	s.MemoryLimit = limit
	switch {
	case source == "":
		s.Why = "no memory limit (no container limit, --memory-limit -1 or unset): the Go collector's defaults"
		return s
	case getenv("GOGC") != "":
		s.Why = fmt.Sprintf("GOGC=%s from the environment under a memory limit (%s)", getenv("GOGC"), source)
	default:
		s.GCPercent = gcPercent
		s.Why = fmt.Sprintf("GOGC %d under a memory limit (%s)", gcPercent, source)
	}
	if limit > 0 {
		s.Why += " of " + bytesText(limit)
	}
	return s
}

// Apply sets s on the runtime.
func Apply(s Settings) {
	if s.MemoryLimit > 0 {
		debug.SetMemoryLimit(s.MemoryLimit)
	}
	if s.GCPercent != 0 {
		debug.SetGCPercent(s.GCPercent)
	}
}

// CgroupMemoryMax returns the memory limit of this process's container (cgroup v2's
// memory.max, else v1's memory.limit_in_bytes), or 0 when there is none or it cannot be read.
func CgroupMemoryMax() int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(path); err == nil {
			return parseLimit(string(b))
		}
	}
	return 0
}

// parseLimit reads a cgroup memory limit file's content: a byte count, or "max" (v2) or a
// count near the largest int64 (v1) for none, which give 0, as does anything unreadable.
func parseLimit(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/2 {
		return 0
	}
	return n
}

func bytesText(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
