// Package gctune chooses the Go collector's settings for a picker process (decision 1116).
// A picker allocates per request (gRPC messages, the body, the answer) and holds a small
// live heap, so at Go's default GOGC=100 it collects many times a second, and each cycle
// costs CPU and tail latency. Under a memory limit the collector can run less often and let
// the limit, not the heap's growth, bound memory: the Go runtime then collects harder as the
// heap nears the limit.
//
// Under a memory limit the heap can also be pre-touched (WithPretouch, decisions 1184 and
// 1187): the collector runs only at the limit, and the memory up to it is written once at
// start-up, so that a burst of hostile input finds its heap already mapped instead of faulting
// a new one page by page while it arrives.
//
// Plan, WithPretouch and LazyRelease are pure; CgroupMemoryMax, Mapped and Apply are the
// effects.
package gctune

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
)

// DefaultGCPercent is the GOGC a picker runs with under a memory limit.
const DefaultGCPercent = 400

// LimitShare is the part of the container's memory given to the Go runtime's soft limit;
// the rest is for what the runtime does not count (thread stacks outside the heap, cgo's
// libzmq) and for slack.
const LimitShare = 0.9

// The pre-touch writes the heap until the runtime's mapped memory (all it holds from the OS
// and has not handed back) reaches a share of the memory limit. The collector's goal under a
// limit is about 97% of it less the runtime's other memory, and the heap reaches it before the
// first collection; the scavenger keeps mapped at most 95% of the limit. What decides the share
// is how the runtime hands memory back (decision 1187):
const (
	// PretouchEagerShare is the share under Go's default release (MADV_DONTNEED: a page
	// handed back is gone, and the next use faults it in again): the scavenger's 95% less 2%
	// for the stacks and metadata the process adds after start. The heap's growth from there
	// to the collector's goal faults at every collection at the limit.
	PretouchEagerShare = 0.93
	// PretouchLazyShare is the share under GODEBUG=madvdontneed=0 (MADV_FREE: a page handed
	// back stays resident until the kernel needs the memory, and its next use does not
	// fault): the whole limit, so the heap's growth to the collector's goal finds every page
	// written, at the first collection and at every one after.
	PretouchLazyShare = 1.0
)

// Settings are what Apply sets. A zero field is left as the runtime has it.
type Settings struct {
	GCPercent   int   // GOGC; 0: unchanged; -1: off (the collector runs at the memory limit only)
	MemoryLimit int64 // bytes; 0: unchanged
	Pretouch    int64 // bytes of mapped memory (runtime/metrics: total less released) Apply writes the heap up to; 0: none
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

// WithPretouch returns s with the heap pre-touched and the collector running only at its
// memory limit (GOGC off), when s has a limit in bytes and a GOGC of its own (Plan's under
// --memory-limit or a container's limit). The heap is written up to PretouchLazyShare of the
// limit when getenv's GODEBUG hands memory back lazily (madvdontneed=0), else up to
// PretouchEagerShare. Otherwise (no limit, GOMEMLIMIT or GOGC from the environment: the
// operator's) it returns s unchanged, with the reason in Why.
//
// A GOGC-paced heap cannot be pre-touched: its goal follows the live heap, so the scavenger
// hands memory above it back to the OS and the next burst faults it in again. With GOGC off
// the goal is the limit, and the scavenger keeps what is mapped under 95% of it.
func WithPretouch(s Settings, getenv func(string) string) Settings {
	if s.MemoryLimit <= 0 || s.GCPercent <= 0 {
		s.Why += "; not pre-touched (pre-touching needs a limit in bytes, from --memory-limit or the container's, and a GOGC of the picker's own)"
		return s
	}
	s.GCPercent = -1
	if LazyRelease(getenv("GODEBUG")) {
		s.Pretouch = int64(float64(s.MemoryLimit) * PretouchLazyShare)
		s.Why += fmt.Sprintf("; pre-touched: the heap written until the runtime holds %s (all the limit), GOGC off (collections at the limit only); GODEBUG=madvdontneed=0: what the runtime hands back stays resident", bytesText(s.Pretouch))
		return s
	}
	s.Pretouch = int64(float64(s.MemoryLimit) * PretouchEagerShare)
	s.Why += fmt.Sprintf("; pre-touched: the heap written until the runtime holds %s (%.0f%% of the limit), GOGC off (collections at the limit only); the heap's growth above it faults at each collection: GODEBUG=madvdontneed=0 would keep the whole limit resident", bytesText(s.Pretouch), PretouchEagerShare*100)
	return s
}

// LazyRelease reports whether the GODEBUG value has the runtime hand memory back lazily
// (madvdontneed=0: MADV_FREE; the last setting of it counts, as at the runtime's start).
func LazyRelease(godebug string) bool {
	lazy := false
	for field := range strings.SplitSeq(godebug, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(field), "madvdontneed="); ok {
			lazy = v == "0"
		}
	}
	return lazy
}

// Apply sets s on the runtime. With s.Pretouch it first allocates and writes heap (one byte
// per page) until the runtime's mapped memory reaches s.Pretouch, with no memory limit yet so
// that nothing collects while it does, then drops it and collects, so the pages stay mapped as
// free heap, and only then sets the limit. That is a first-touch fault per page: about 18 us
// of CPU each on the project's VM, some 4.5 s per GiB (decision 1184).
func Apply(s Settings) {
	if s.GCPercent != 0 {
		debug.SetGCPercent(s.GCPercent)
	}
	if s.Pretouch > 0 {
		debug.SetMemoryLimit(math.MaxInt64)
		pretouch(s.Pretouch - Mapped())
		runtime.GC()
	}
	if s.MemoryLimit > 0 {
		debug.SetMemoryLimit(s.MemoryLimit)
	}
}

// Mapped is the memory the Go runtime holds from the OS and has not handed back, in bytes
// (runtime/metrics: /memory/classes/total less /memory/classes/heap/released): what its
// memory limit and its scavenger count.
func Mapped() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}

// pretouchChunk is the size of pretouch's allocations: large objects, each its own span of
// fresh memory, which the runtime does not clear (the OS gives it zeroed).
const pretouchChunk = 4 << 20

// pretouch allocates n bytes in chunks (none when n <= 0), writes one byte per page of each,
// and drops them.
func pretouch(n int64) {
	page := os.Getpagesize()
	held := make([][]byte, 0, max(n, 0)/pretouchChunk+1)
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
