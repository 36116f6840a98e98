package extload

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"

	"github.com/loadaware/loadaware-epp/gctune"
)

// ServerMain is a server process's side of a run (Benchmark starts it through
// Config.Server): it parses the arguments Benchmark passes, starts one server on a loopback
// port and speaks the child protocol (ServeChild) on stdin and stdout. name prefixes its
// errors; it returns the process's exit code.
func ServerMain(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	kind := fs.String("kind", ServerNothing, "which server: "+strings.Join(Servers, ", "))
	procs := fs.Int("procs", 1, "GOMAXPROCS (0: the Go default)")
	endpoints := fs.Int("endpoints", 2, "static endpoints of the picker")
	policy := fs.String("policy", "loadaware", "the picker's policy")
	tok := fs.String("tokenizer", "", "tokenizer.json or model directory for the picker")
	profile := fs.String("cpuprofile", "", "write a CPU profile of this process to this file")
	traceTo := fs.String("trace", "", "write an execution trace of this process to this file")
	memLimit := fs.Int64("memory-limit", 0, "the picker's --memory-limit in bytes; 0: none")
	gcPercent := fs.Int("gc-percent", gctune.DefaultGCPercent, "the picker's --gc-percent")
	cpu := fs.Int("cpu", -1, "run every thread of this process on this CPU only; -1: any")
	scores := fs.Bool("endpoint-scores", true, "the picker's --endpoint-scores")
	flight := fs.Bool("flight", false, "keep the last seconds' execution trace in a flight recorder, written on the parent's snapshot request")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, name+": "+format+"\n", a...)
		return 1
	}
	if !slices.Contains(Servers, *kind) {
		fmt.Fprintf(stderr, "%s: -kind %q: use one of %s\n", name, *kind, strings.Join(Servers, ", "))
		return 2
	}
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	if *cpu >= 0 {
		if _, err := Pin([]int{*cpu}); err != nil {
			return fail("%v", err)
		}
	}
	for _, r := range []struct {
		path, what string
		start      func(io.Writer) error
		stop       func()
	}{
		{*profile, "the CPU profile", pprof.StartCPUProfile, pprof.StopCPUProfile},
		{*traceTo, "the execution trace", trace.Start, trace.Stop},
	} {
		if r.path == "" {
			continue
		}
		f, err := os.Create(r.path)
		if err != nil {
			return fail("%v", err)
		}
		defer f.Close()
		if err := r.start(f); err != nil {
			return fail("start %s: %v", r.what, err)
		}
		defer r.stop()
	}
	var start func(context.Context) (string, func() error, error)
	switch *kind {
	case ServerNothing:
		start = func(context.Context) (string, func() error, error) { return ServeFloor(Nothing{}) }
	case ServerPass:
		start = func(context.Context) (string, func() error, error) { return ServeFloor(PassThrough{}) }
	case ServerOurs:
		if *memLimit > 0 {
			gctune.Apply(gctune.Plan(os.Getenv, 0, *gcPercent, *memLimit))
		}
		start = func(ctx context.Context) (string, func() error, error) {
			return StartPicker(ctx, *endpoints, *policy, *tok, !*scores, stderr)
		}
	}
	var snapshot func(string) error
	if *flight {
		fr, err := StartFlight()
		if err != nil {
			return fail("start the flight recorder: %v", err)
		}
		defer fr.Stop()
		snapshot = func(path string) error { return WriteFlight(fr, path) }
	}
	if err := ServeChild(ctx, stdin, stdout, start, snapshot); err != nil {
		return fail("%v", err)
	}
	return 0
}
