package soak

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/loadaware/loadaware-epp/bench/stats"
)

// The timeline is what the soak reads every timelineStep through the whole run, so that the
// seconds that make a window's p99 can be set beside what happened in them (decision 1188):
// the process's CPU and its threads' wait for a CPU (the kernel's run queue), the rest of the
// machine's CPU, the hostile process's CPU and what it got out, the Go run queue's wait, the
// collections and their pauses, and the page faults.

// timelineStep is the timeline's resolution.
const timelineStep = 100 * time.Millisecond

// reading is one of the timeline's readings; everything in it is a running total, so two
// readings give what happened between them.
type reading struct {
	at         time.Duration // since the steady traffic began
	cpu        time.Duration // the process's user+system CPU (getrusage)
	runqWait   time.Duration // the process's threads' time runnable but not running (/proc/self/task/*/schedstat)
	hostBusy   time.Duration // the machine's CPU time not idle, every process (/proc/stat)
	hostileCPU time.Duration // the hostile clients' own process (0 when they run in this one)
	faults     int64
	gcCycles   uint64
	sched      *metrics.Float64Histogram // /sched/latencies:seconds
	stw        *metrics.Float64Histogram // /sched/pauses/total/gc:seconds
	sent       sent
}

var timelineNames = []string{"/gc/cycles/total:gc-cycles", "/sched/latencies:seconds", "/sched/pauses/total/gc:seconds"}

// readTimeline takes one reading at since; hostileCPU and hostileSent read the hostile clients.
func readTimeline(since time.Duration, hostileCPU func() time.Duration, hostileSent func() sent) reading {
	r := reading{at: since, runqWait: threadsRunqWait(), hostBusy: hostBusy(), hostileCPU: hostileCPU(), sent: hostileSent()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		r.faults = ru.Minflt
	}
	s := readMetrics(timelineNames)
	if s[0].Value.Kind() == metrics.KindUint64 {
		r.gcCycles = s[0].Value.Uint64()
	}
	r.sched, r.stw = histOK(s[1]), histOK(s[2])
	return r
}

// threadsRunqWait is the time the process's threads have spent runnable and waiting for a CPU
// (the second field of each /proc/self/task/TID/schedstat, in nanoseconds), summed; 0 when
// the kernel keeps no schedstats. Threads that have exited are no longer counted, which
// undercounts a window but never adds to it.
func threadsRunqWait() time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", t.Name(), "schedstat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				sum += time.Duration(ns)
			}
		}
	}
	return sum
}

// hostBusy is the CPU time the machine has spent not idle (every process; /proc/stat's cpu
// line less idle and iowait), 0 when it cannot be read.
func hostBusy() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	fs := strings.Fields(sc.Text())
	if len(fs) < 6 || fs[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range fs[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / clockTicks
}

// recordTimeline reads the timeline every timelineStep from now until ctx ends; the function
// it returns waits for that and gives the readings.
func recordTimeline(ctx context.Context, begin time.Time, hostileCPU func() time.Duration, hostileSent func() sent) func() []reading {
	var rs []reading
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(timelineStep)
		defer tick.Stop()
		for {
			rs = append(rs, readTimeline(time.Since(begin), hostileCPU, hostileSent))
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []reading { <-done; return rs }
}

// tailSecond is the one-second span within [from, to) that holds the most of the requests
// there that are slower than that window's p99 (its tail), sliding in steps of step; ties go
// to the earliest. A request belongs to the span its start falls in. It returns the span's
// start, how many tail requests it holds and how many the window has; ok is false when the
// window has no requests.
func tailSecond(rs []result, from, to, step time.Duration) (at time.Duration, held, tail int, ok bool) {
	var starts []time.Duration
	var took []time.Duration
	for _, r := range rs {
		if s := r.at - r.took; s >= from && s < to {
			starts, took = append(starts, s), append(took, r.took)
		}
	}
	if len(took) == 0 {
		return 0, 0, 0, false
	}
	cut := time.Duration(stats.Percentiles(millis(took), 99)[0] * float64(time.Millisecond))
	var slow []time.Duration
	for i, d := range took {
		if d > cut {
			slow = append(slow, starts[i])
		}
	}
	at = from
	for s := from; s+time.Second <= to || s == from; s += step {
		n := 0
		for _, x := range slow {
			if x >= s && x < s+time.Second {
				n++
			}
		}
		if n > held {
			at, held = s, n
		}
	}
	return at, held, len(slow), true
}

// secondFigures is what happened in one span of the timeline, per wall second.
type secondFigures struct {
	cores, hostileCores, othersCores float64 // the process; the hostile process; the rest of the machine
	runqMSps                         float64 // the process's threads' wait for a CPU, ms per second
	schedP99us                       float64 // Go's run queue, goroutines' wait to run
	gcCycles                         uint64
	stwMaxMS                         float64
	faultsPerSec, bodyMiBps          float64
	lmcachePerSec, promptsPerSec     float64
}

// spanFigures gives the figures between the readings nearest from and to (from's at or before
// it, to's at or after it); ok is false when the timeline does not cover the span.
func spanFigures(rs []reading, from, to time.Duration) (f secondFigures, ok bool) {
	i := -1
	for k, r := range rs {
		if r.at <= from {
			i = k
		}
	}
	j := slices.IndexFunc(rs, func(r reading) bool { return r.at >= to })
	if i < 0 || j < 0 || j <= i {
		return f, false
	}
	a, b := rs[i], rs[j]
	wall := (b.at - a.at).Seconds()
	f.cores = (b.cpu - a.cpu).Seconds() / wall
	f.hostileCores = (b.hostileCPU - a.hostileCPU).Seconds() / wall
	f.othersCores = max(0, (b.hostBusy-a.hostBusy).Seconds()/wall-f.cores-f.hostileCores)
	f.runqMSps = float64(b.runqWait-a.runqWait) / float64(time.Millisecond) / wall
	if a.sched != nil && b.sched != nil {
		f.schedP99us = quantile(a.sched, b.sched, 0.99) * 1e6
	}
	f.gcCycles = b.gcCycles - a.gcCycles
	if a.stw != nil && b.stw != nil {
		for k := len(b.stw.Counts) - 1; k >= 0; k-- {
			if b.stw.Counts[k] > a.stw.Counts[k] {
				f.stwMaxMS = finite(b.stw.Buckets[k+1]) * 1000
				break
			}
		}
	}
	f.faultsPerSec = float64(b.faults-a.faults) / wall
	f.bodyMiBps = float64(b.sent.BodyBytes-a.sent.BodyBytes) / (1 << 20) / wall
	f.lmcachePerSec = float64(b.sent.LMCacheFrames-a.sent.LMCacheFrames) / wall
	f.promptsPerSec = float64(b.sent.PromptsRouted-a.sent.PromptsRouted) / wall
	return f, true
}

func (f secondFigures) String() string {
	return fmt.Sprintf("process %.2f cores, hostile process %.2f, rest of the machine %.2f; the process's threads waited %.0f ms/s for a CPU, goroutines' wait to run p99 %.0f us; %d collections (longest pause <= %.2f ms); %.0f page faults/s; hostile %.1f body MiB/s, %.0f LMCache events/s, %.1f prompts/s",
		f.cores, f.hostileCores, f.othersCores, f.runqMSps, f.schedP99us, f.gcCycles, f.stwMaxMS, f.faultsPerSec, f.bodyMiBps, f.lmcachePerSec, f.promptsPerSec)
}

// windowTail describes a window's tail second against the window's median second (the
// median of each figure over the window's whole seconds). clock is the time from the
// process's start to the timeline's zero, so that the second can be found in gctrace's lines.
func windowTail(name string, rs []result, rd []reading, from, to, clock time.Duration) string {
	at, held, tail, ok := tailSecond(rs, from, to, timelineStep)
	if !ok {
		return fmt.Sprintf("- %s: no requests\n", name)
	}
	worst, ok := spanFigures(rd, at, at+time.Second)
	if !ok {
		return fmt.Sprintf("- %s: the timeline does not cover %v-%v\n", name, at, at+time.Second)
	}
	var all []secondFigures
	for s := from; s+time.Second <= to; s += time.Second {
		if f, ok := spanFigures(rd, s, s+time.Second); ok {
			all = append(all, f)
		}
	}
	med := func(get func(secondFigures) float64) float64 {
		xs := make([]float64, len(all))
		for i, f := range all {
			xs[i] = get(f)
		}
		if len(xs) == 0 {
			return math.NaN()
		}
		return stats.Percentiles(xs, 50)[0]
	}
	median := secondFigures{cores: med(func(f secondFigures) float64 { return f.cores }),
		hostileCores: med(func(f secondFigures) float64 { return f.hostileCores }), othersCores: med(func(f secondFigures) float64 { return f.othersCores }),
		runqMSps: med(func(f secondFigures) float64 { return f.runqMSps }), schedP99us: med(func(f secondFigures) float64 { return f.schedP99us }),
		gcCycles: uint64(med(func(f secondFigures) float64 { return float64(f.gcCycles) })), stwMaxMS: med(func(f secondFigures) float64 { return f.stwMaxMS }),
		faultsPerSec: med(func(f secondFigures) float64 { return f.faultsPerSec }), bodyMiBps: med(func(f secondFigures) float64 { return f.bodyMiBps }),
		lmcachePerSec: med(func(f secondFigures) float64 { return f.lmcachePerSec }), promptsPerSec: med(func(f secondFigures) float64 { return f.promptsPerSec })}
	return fmt.Sprintf("- %s: the second from %.1f s (%.1f s on gctrace's clock) holds %d of its %d requests over its p99; in it: %v\n  - its median second: %v\n",
		name, at.Seconds(), (at + clock).Seconds(), held, tail, worst, median)
}
