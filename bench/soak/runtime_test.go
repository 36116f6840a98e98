package soak

import (
	"fmt"
	"math"
	"runtime/metrics"
	"syscall"
	"time"
)

// runtimeSnap is one reading of the Go runtime's and the process's own counters, taken
// so that two readings say where a phase's time went: waiting to be scheduled (CPU
// starvation), garbage collection, or lock contention.
type runtimeSnap struct {
	at        time.Time
	cpu       time.Duration // user+system CPU of the whole process (getrusage)
	faults    int64         // minor page faults of the whole process (getrusage): first touches of memory
	gcCPU     float64       // /cpu/classes/gc/total:cpu-seconds
	mutexWait float64       // /sync/mutex/wait/total:seconds
	gcCycles  uint64
	liveHeap  uint64                    // /gc/heap/live:bytes: the heap marked live by the last collection
	scavCPU   float64                   // /cpu/classes/scavenge/total:cpu-seconds: handing memory back to the OS
	released  uint64                    // /memory/classes/heap/released:bytes: heap handed back and not reused
	sched     *metrics.Float64Histogram // /sched/latencies:seconds: runnable -> running
	stw       *metrics.Float64Histogram // /sched/pauses/total/gc:seconds
}

var runtimeNames = []string{
	"/cpu/classes/gc/total:cpu-seconds",
	"/sync/mutex/wait/total:seconds",
	"/gc/cycles/total:gc-cycles",
	"/sched/latencies:seconds",
	"/sched/pauses/total/gc:seconds",
	"/gc/heap/live:bytes",
	"/cpu/classes/scavenge/total:cpu-seconds",
	"/memory/classes/heap/released:bytes",
}

func readRuntime() runtimeSnap {
	s := readMetrics(runtimeNames)
	r := runtimeSnap{at: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		r.faults = ru.Minflt
	}
	for _, v := range s {
		switch v.Name {
		case runtimeNames[0]:
			r.gcCPU = float64OK(v)
		case runtimeNames[1]:
			r.mutexWait = float64OK(v)
		case runtimeNames[2]:
			if v.Value.Kind() == metrics.KindUint64 {
				r.gcCycles = v.Value.Uint64()
			}
		case runtimeNames[3]:
			r.sched = histOK(v)
		case runtimeNames[4]:
			r.stw = histOK(v)
		case runtimeNames[5]:
			if v.Value.Kind() == metrics.KindUint64 {
				r.liveHeap = v.Value.Uint64()
			}
		case runtimeNames[6]:
			r.scavCPU = float64OK(v)
		case runtimeNames[7]:
			if v.Value.Kind() == metrics.KindUint64 {
				r.released = v.Value.Uint64()
			}
		}
	}
	return r
}

// readMetrics reads the runtime metrics named, in order.
func readMetrics(names []string) []metrics.Sample {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	return s
}

func float64OK(v metrics.Sample) float64 {
	if v.Value.Kind() == metrics.KindFloat64 {
		return v.Value.Float64()
	}
	return math.NaN()
}

func histOK(v metrics.Sample) *metrics.Float64Histogram {
	if v.Value.Kind() == metrics.KindFloat64Histogram {
		return v.Value.Float64Histogram()
	}
	return nil
}

// runtimePhase is what happened between two readings.
type runtimePhase struct {
	wall         float64 // seconds between the readings
	cores        float64 // process CPU per wall second
	faultsPerSec float64 // minor page faults per wall second
	gcShare      float64 // of the process's CPU
	mutexWaitMS  float64 // per wall second
	gcPerSec     float64
	schedP99us   float64 // goroutines' wait to run, 99th percentile
	schedP999us  float64
	stwMaxMS     float64 // longest GC stop-the-world pause (bucket upper bound)
	schedSamples uint64
	// liveMiB is the heap the last collection of the phase marked live; -1 when the heap was
	// not collected in the phase (a pre-touched heap, collected at its limit only).
	liveMiB float64
	// scavMS is the CPU the runtime spent handing memory back, ms per wall second;
	// releasedMiB the change in the heap it holds handed back (negative: reused).
	scavMS, releasedMiB float64
}

func phase(a, b runtimeSnap) runtimePhase {
	wall := b.at.Sub(a.at).Seconds()
	cpu := (b.cpu - a.cpu).Seconds()
	p := runtimePhase{wall: wall, cores: cpu / wall, mutexWaitMS: (b.mutexWait - a.mutexWait) * 1000 / wall,
		gcPerSec: float64(b.gcCycles-a.gcCycles) / wall, faultsPerSec: float64(b.faults-a.faults) / wall, liveMiB: -1,
		scavMS: (b.scavCPU - a.scavCPU) * 1000 / wall, releasedMiB: (float64(b.released) - float64(a.released)) / (1 << 20)}
	if b.gcCycles > a.gcCycles {
		p.liveMiB = float64(b.liveHeap) / (1 << 20)
	}
	if cpu > 0 {
		p.gcShare = (b.gcCPU - a.gcCPU) / cpu
	}
	if a.sched != nil && b.sched != nil {
		p.schedP99us = quantile(a.sched, b.sched, 0.99) * 1e6
		p.schedP999us = quantile(a.sched, b.sched, 0.999) * 1e6
		for i := range b.sched.Counts {
			p.schedSamples += b.sched.Counts[i] - a.sched.Counts[i]
		}
	}
	if a.stw != nil && b.stw != nil {
		for i := len(b.stw.Counts) - 1; i >= 0; i-- {
			if b.stw.Counts[i] > a.stw.Counts[i] {
				p.stwMaxMS = finite(b.stw.Buckets[i+1]) * 1000
				break
			}
		}
	}
	return p
}

// quantile of the observations added between histograms a and b (same buckets): the
// upper bound of the bucket holding it.
func quantile(a, b *metrics.Float64Histogram, q float64) float64 {
	var total uint64
	for i := range b.Counts {
		total += b.Counts[i] - a.Counts[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range b.Counts {
		seen += b.Counts[i] - a.Counts[i]
		if seen >= want {
			return finite(b.Buckets[i+1])
		}
	}
	return finite(b.Buckets[len(b.Buckets)-1])
}

func finite(v float64) float64 {
	if math.IsInf(v, 0) {
		return math.NaN()
	}
	return v
}

func (p runtimePhase) String() string {
	return fmt.Sprintf("process CPU %.2f cores (GC %.0f%%, %.1f cycles/s, longest stop-the-world <= %.2f ms); goroutines' wait to run p99 %.0f us, p99.9 %.0f us (%d waits); mutex wait %.1f ms/s; %.0f minor page faults/s; handing memory back %.1f ms/s of CPU, heap handed back %+.0f MiB",
		p.cores, p.gcShare*100, p.gcPerSec, p.stwMaxMS, p.schedP99us, p.schedP999us, p.schedSamples, p.mutexWaitMS, p.faultsPerSec, p.scavMS, p.releasedMiB)
}
