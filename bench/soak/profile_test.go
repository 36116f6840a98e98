package soak

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/gctune"
)

// onsetMarks are the moments after the hostile clients start at which LOADAWARE_SOAK_PROFILE
// records the process's memory: the onset's growth (decision 1184).
var onsetMarks = []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second}

// memoryClasses are the Go runtime's partition of the memory it has mapped: each byte it
// holds from the OS is in exactly one of the leaves (runtime/metrics).
var memoryClasses = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/os-stacks:bytes",
	"/memory/classes/metadata/other:bytes",
	"/memory/classes/metadata/mspan/inuse:bytes",
	"/memory/classes/metadata/mcache/inuse:bytes",
	"/memory/classes/profiling/buckets:bytes",
	"/memory/classes/other:bytes",
	"/memory/classes/total:bytes",
	"/gc/heap/goal:bytes",
	"/gc/heap/live:bytes",
	"/gc/cycles/total:gc-cycles",
	"/gc/gogc:percent",
	"/gc/gomemlimit:bytes",
}

// memoryReport is one line per class of the runtime's memory (MiB) and the kernel's view of
// the process (/proc/self/status: VmRSS, RssAnon, RssFile, VmHWM).
func memoryReport() string {
	s := readMetrics(memoryClasses)
	var b strings.Builder
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			x := v.Value.Uint64()
			if strings.HasSuffix(v.Name, ":bytes") {
				fmt.Fprintf(&b, "%s %.1f MiB\n", v.Name, float64(x)/(1<<20))
			} else {
				fmt.Fprintf(&b, "%s %d\n", v.Name, x)
			}
		}
	}
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			for _, k := range []string{"VmRSS:", "RssAnon:", "RssFile:", "VmHWM:"} {
				if strings.HasPrefix(sc.Text(), k) {
					b.WriteString(sc.Text() + "\n")
				}
			}
		}
	}
	return b.String()
}

// profileOnset, with LOADAWARE_SOAK_PROFILE set to a directory, writes there the memory
// report and the heap and allocation profiles at each of onsetMarks within the hostile
// window of length d that starts now (mem-<mark>.txt, heap-<mark>.pb.gz, allocs-<mark>.pb.gz),
// and CPU profiles of the window's first 3 s (cpu-onset.pb.gz) and, when the window is 9 s or
// longer, of 3 s from two-thirds into it (cpu-later.pb.gz). It returns a function that waits
// for all of them; without the variable it does nothing.
func profileOnset(t *testing.T, d time.Duration) (wait func()) {
	dir := os.Getenv("LOADAWARE_SOAK_PROFILE")
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, f func(*os.File) error) {
		out, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Error(err)
			return
		}
		defer out.Close()
		if err := f(out); err != nil {
			t.Error(err)
		}
	}
	write("mem-before.txt", func(f *os.File) error { _, err := f.WriteString(memoryReport()); return err })
	begin := time.Now()
	cpu := func(name string, from, length time.Duration) {
		time.Sleep(time.Until(begin.Add(from)))
		write(name, func(f *os.File) error {
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			time.Sleep(length)
			pprof.StopCPUProfile()
			return nil
		})
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		cpu("cpu-onset.pb.gz", 0, min(3*time.Second, d))
		if d >= 9*time.Second {
			cpu("cpu-later.pb.gz", d*2/3, 3*time.Second)
		}
	})
	wg.Go(func() {
		for _, m := range onsetMarks {
			if m >= d {
				return
			}
			time.Sleep(time.Until(begin.Add(m)))
			write("mem-"+m.String()+".txt", func(f *os.File) error { _, err := f.WriteString(memoryReport()); return err })
			write("heap-"+m.String()+".pb.gz", func(f *os.File) error { return pprof.Lookup("heap").WriteTo(f, 0) })
			write("allocs-"+m.String()+".pb.gz", func(f *os.File) error { return pprof.Lookup("allocs").WriteTo(f, 0) })
		}
	})
	return wg.Wait
}

// profileHostile, with LOADAWARE_SOAK_CPUPROFILE set to a file name, writes there a CPU
// profile of the test's process over the whole hostile window that starts now (picker,
// gateway stand-in, engines, steady clients, and the hostile clients unless they run in their
// own process), to attribute its CPU by component and by hostile client (decision 1207). It
// returns a function that stops the profile and closes the file; without the variable it does
// nothing. It cannot be combined with -test.cpuprofile or LOADAWARE_SOAK_PROFILE's CPU profiles
// (the runtime takes one CPU profile at a time): the test fails saying so.
func profileHostile(t *testing.T) (stop func()) {
	name := os.Getenv("LOADAWARE_SOAK_CPUPROFILE")
	if name == "" {
		return func() {}
	}
	if os.Getenv("LOADAWARE_SOAK_PROFILE") != "" {
		t.Fatal("LOADAWARE_SOAK_CPUPROFILE and LOADAWARE_SOAK_PROFILE both take CPU profiles, one at a time: set only one")
	}
	f, err := os.Create(name)
	if err != nil {
		t.Fatalf("LOADAWARE_SOAK_CPUPROFILE: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		t.Fatalf("LOADAWARE_SOAK_CPUPROFILE: %v (drop -test.cpuprofile: one CPU profile at a time)", err)
	}
	return sync.OnceFunc(func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			t.Errorf("LOADAWARE_SOAK_CPUPROFILE: %v", err)
		}
	})
}

// soakPodBytes is the container the soak's process is taken to run in when
// LOADAWARE_SOAK_GC is pod or pretouch: the picker's collector settings are then what
// gctune gives a picker there (90% of it as the memory limit). It is under the 1 GiB the
// soak allows its process's RSS.
const soakPodBytes = 768 << 20

// chartPodBytes is the Helm chart's default container for the picker (values.yaml
// picker.resources.limits.memory, requested whole under picker.heapPretouch; decision 1186),
// the container of LOADAWARE_SOAK_GC=chart.
const chartPodBytes = 1 << 30

// tuneCollector applies LOADAWARE_SOAK_GC to the soak's process, as cmd/loadaware-epp does
// to a picker's: "go" leaves Go's defaults (GOGC 100, no limit), "pod" is gctune's plan for
// a soakPodBytes container, "pretouch" that plan pre-touched (decision 1184), "chart" the
// Helm chart's default: a chartPodBytes container, pre-touched, with the chart's
// GODEBUG=madvdontneed=0 (decisions 1186 and 1187; the process must be started with it),
// and "chart-gogc" that with GOGC 400 kept (a candidate, decision 1187). It returns what it
// applied and puts the collector back when t ends.
func tuneCollector(t *testing.T) gctune.Settings {
	mode := os.Getenv("LOADAWARE_SOAK_GC")
	var s gctune.Settings
	switch mode {
	case "go":
		return gctune.Settings{Why: "Go's defaults (LOADAWARE_SOAK_GC=go)"}
	case "pod", "pretouch", "":
		s = gctune.Plan(os.Getenv, soakPodBytes, gctune.DefaultGCPercent, 0)
		if mode != "pod" {
			s = gctune.WithPretouch(s, os.Getenv)
		}
	case "chart":
		if !gctune.LazyRelease(os.Getenv("GODEBUG")) {
			t.Fatalf("LOADAWARE_SOAK_GC=chart is the chart's pod, which runs with GODEBUG=madvdontneed=0: start the soak with it (GODEBUG=%q now)", os.Getenv("GODEBUG"))
		}
		s = gctune.WithPretouch(gctune.Plan(os.Getenv, chartPodBytes, gctune.DefaultGCPercent, 0), os.Getenv)
	case "chart-gogc":
		// A candidate, not a plan the binary runs (decision 1187): the chart's pre-touch to the
		// whole limit with its GOGC 400 kept, so the collector is paced by the live heap (a
		// runway from recent cycles) and the scavenger's trimming to its goal is lazy.
		if !gctune.LazyRelease(os.Getenv("GODEBUG")) {
			t.Fatalf("LOADAWARE_SOAK_GC=chart-gogc needs GODEBUG=madvdontneed=0, as the chart's pod has (GODEBUG=%q now)", os.Getenv("GODEBUG"))
		}
		s = gctune.Plan(os.Getenv, chartPodBytes, gctune.DefaultGCPercent, 0)
		s.Pretouch = int64(float64(s.MemoryLimit) * gctune.PretouchLazyShare)
		s.Why += "; pre-touched to the whole limit with GOGC kept (the chart-gogc candidate, decision 1187)"
	default:
		t.Fatalf("LOADAWARE_SOAK_GC=%q: use go, pod, pretouch (the default), chart or chart-gogc", mode)
	}
	gogc, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(gogc)
	t.Cleanup(func() {
		debug.SetGCPercent(gogc)
		debug.SetMemoryLimit(limit)
	})
	start := time.Now()
	gctune.Apply(s)
	if s.Pretouch > 0 {
		s.Why += fmt.Sprintf(" (the pre-touch took %.2f s)", time.Since(start).Seconds())
	}
	return s
}
