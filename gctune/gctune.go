// Package gctune chooses the Go collector's settings for a picker process (decision 1116).
// A picker allocates per request (gRPC messages, the body, the answer) and holds a small
// live heap, so at Go's default GOGC=100 it collects many times a second, and each cycle
// costs CPU and tail latency. Under a memory limit the collector can run less often and let
// the limit, not the heap's growth, bound memory: the Go runtime then collects harder as the
// heap nears the limit.
//
// Under a memory limit the heap can also be pre-touched (WithPretouch, decision 1184): the
// collector runs only at the limit, and the memory up to it is written once at start-up, so
// that a burst of hostile input finds its heap already mapped instead of faulting a new one
// page by page while it arrives.
//
// Plan and WithPretouch are pure; CgroupMemoryMax and Apply are the effects.
package gctune

import (
	"fmt"
	"math"
	"os"
	"runtime"
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

// PretouchShare is the part of the memory limit WithPretouch touches. The Go runtime's
// scavenger hands memory back to the OS only above 95% of the limit, and the runtime's
// memory outside the heap (stacks, metadata) and the heap the process already has at start
// are a few tens of MiB beside it: what is touched stays mapped.
const PretouchShare = 0.9

// Settings are what Apply sets. A zero field is left as the runtime has it.
type Settings struct {
	GCPercent   int   // GOGC; 0: unchanged; -1: off (the collector runs at the memory limit only)
	MemoryLimit int64 // bytes; 0: unchanged
	Pretouch    int64 // heap bytes written once at Apply; 0: none
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

// WithPretouch returns s with the heap pre-touched up to PretouchShare of its memory limit
// and the collector running only at that limit (GOGC off), when s has a limit in bytes and a
// GOGC of its own (Plan's under --memory-limit or a container's limit). Otherwise (no limit,
// GOMEMLIMIT or GOGC from the environment: the operator's) it returns s unchanged, with the
// reason in Why.
//
// A GOGC-paced heap cannot be pre-touched: its goal follows the live heap, so the scavenger
// hands memory above it back to the OS and the next burst faults it in again. With GOGC off
// the goal is the limit, and the scavenger keeps what is mapped under 95% of it.
func WithPretouch(s Settings) Settings {
	if s.MemoryLimit <= 0 || s.GCPercent <= 0 {
		s.Why += "; not pre-touched (pre-touching needs a limit in bytes, from --memory-limit or the container's, and a GOGC of the picker's own)"
		return s
	}
	s.GCPercent = -1
	s.Pretouch = int64(float64(s.MemoryLimit) * PretouchShare)
	s.Why += fmt.Sprintf("; pre-touched: %s of the heap written at start, GOGC off (collections at the limit only)", bytesText(s.Pretouch))
	return s
}

// Apply sets s on the runtime. With s.Pretouch it allocates and writes that many bytes of
// heap (one byte per page), drops them and collects, so the pages stay mapped as free heap.
// That is a first-touch fault per page: about 18 us of CPU each on the project's VM, some
// 4.5 s per GiB (decision 1184).
func Apply(s Settings) {
	if s.MemoryLimit > 0 {
		debug.SetMemoryLimit(s.MemoryLimit)
	}
	if s.GCPercent != 0 {
		debug.SetGCPercent(s.GCPercent)
	}
	if s.Pretouch > 0 {
		pretouch(s.Pretouch)
		runtime.GC()
	}
}

// pretouchChunk is the size of pretouch's allocations: large objects, each its own span of
// fresh memory, which the runtime does not clear (the OS gives it zeroed).
const pretouchChunk = 4 << 20

// pretouch allocates n bytes in chunks, writes one byte per page of each, and drops them.
func pretouch(n int64) {
	page := os.Getpagesize()
	held := make([][]byte, 0, n/pretouchChunk+1)
	for n > 0 {
		b := make([]byte, min(n, pretouchChunk))
		for i := 0; i < len(b); i += page {
			b[i] = 1
		}
		held = append(held, b)
		n -= int64(len(b))
	}
	runtime.KeepAlive(held)
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
