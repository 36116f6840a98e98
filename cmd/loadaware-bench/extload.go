package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/loadaware/loadaware-epp/bench/extload"
	"github.com/loadaware/loadaware-epp/gctune"
)

func init() {
	register(command{name: "extload", summary: "open-loop ext_proc load on the picker beside a do-nothing and a pass-through ext_proc server: latency and CPU ratios", run: runExtload})
	register(command{name: extloadServerName, summary: "(started by extload) one ext_proc server in its own process, on loopback", run: func(ctx context.Context, _ *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
		if code := extload.ServerMain(ctx, extloadServerName, args, os.Stdin, stdout, stderr); code != 0 {
			return exitCode(code)
		}
		return nil
	}})
	register(command{name: extloadFeederName, summary: "(started by extload -lmcache-rate) an engine's LMCache worker in its own process, pushing to the picker", run: func(ctx context.Context, _ *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
		if code := extload.FeederMain(ctx, extloadFeederName, args, os.Stdin, stdout, stderr); code != 0 {
			return exitCode(code)
		}
		return nil
	}})
}

const (
	extloadServerName = "extload-server"
	extloadFeederName = "extload-feeder"
)

// extloadChildEnv marks a process started as an extload server or feeder; a test binary (which is
// os.Executable in tests) dispatches on it in TestMain.
const extloadChildEnv = "LOADAWARE_BENCH_EXTLOAD_SERVER"

func runExtload(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var c extload.Config
	rates := fs.String("rates", "500,1000,2000", "open-loop rates, requests/s, each run against both servers")
	fs.IntVar(&c.Rounds, "rounds", 1, "times the rates are run (servers alternating first); each server's windows at a rate are pooled, and 3 or more give the p99 ratio a bootstrap interval over them")
	fs.DurationVar(&c.Duration, "duration", 3*time.Second, "measured window per rate, server and round")
	fs.DurationVar(&c.Warmup, "warmup", 500*time.Millisecond, "unmeasured window at the same rate before each measured one")
	fs.IntVar(&c.BodyBytes, "body-bytes", 8192, "request body size (64 B to 16 MiB)")
	fs.StringVar(&c.Prompt, "prompt", "ids", "prompt form: ids (token ids) or text (tokenized when -tokenizer is given, else routed on load alone)")
	fs.IntVar(&c.Endpoints, "endpoints", 2, "static endpoints the picker routes between (1 to 10000; never contacted)")
	fs.StringVar(&c.Policy, "policy", "loadaware", "the picker's policy")
	scores := fs.Bool("endpoint-scores", true, "the picker's --endpoint-scores: the candidates' scores and the reason in each answer's dynamic metadata")
	fs.StringVar(&c.Tokenizer, "tokenizer", "", "tokenizer.json or model directory for the picker (text prompts)")
	fs.IntVar(&c.ServerProcs, "server-procs", 1, "GOMAXPROCS of each server process (0: the Go default)")
	fs.IntVar(&c.MaxInFlight, "max-inflight", 2048, "streams open at once; arrivals beyond are shed and counted")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "longest one stream may take")
	fs.Uint64Var(&c.Seed, "seed", 1, "arrival-time seed")
	fs.BoolVar(&c.Progress, "progress", true, "show progress on stderr")
	fs.IntVar(&c.GCPercent, "server-gc-percent", gctune.DefaultGCPercent, "the picker's --gc-percent: its GOGC under -server-memory-limit")
	fs.Int64Var(&c.MemLimit, "server-memory-limit", 0, "the picker's --memory-limit in bytes, as in a container (GOGC is then its --gc-percent default); 0: none, as outside one")
	fs.StringVar(&c.Profile, "server-cpuprofile", "", "write a CPU profile of the picker's server process to this file (go tool pprof)")
	fs.StringVar(&c.GenProfile, "generator-cpuprofile", "", "write a CPU profile of the load generator (this process) to this file (go tool pprof)")
	fs.StringVar(&c.Trace, "server-trace", "", "write an execution trace of the picker's server process to this file (go tool trace)")
	fs.Float64Var(&c.P99Target, "p99-target", 1.3, "p99 round-trip ratio to each floor server a rate should stay within")
	fs.BoolVar(&c.Pin, "pin", true, "pin each server process to one CPU (the last this process may use) and the generator to the others, as a server on its own core beside Envoy; with one CPU, or -pin=false, all share every CPU")
	fs.DurationVar(&c.Stall, "stall", 50*time.Millisecond, "a round trip longer than this is a stall: the report counts each server's windows with one")
	fs.StringVar(&c.FlightDir, "server-flight", "", "run a flight recorder in every server and, after a window with a stall, write its last seconds' execution trace to this directory (go tool trace)")
	fs.Float64Var(&c.FeedRate, "lmcache-rate", 0, "LMCache batches per second an engine's worker pushes to the picker's controller during the picker's windows (Poisson-timed, from a process of its own with the generator's CPU affinity), so it ingests while it decides; 0: none")
	fs.IntVar(&c.FeedEvents, "lmcache-batch", 7, "KV admit events per LMCache batch (1 to 50; 7 is one 1,578-token prompt's chunks of 256)")
	fs.DurationVar(&c.CPUTarget, "cpu-target", 100*time.Microsecond, "extra CPU per request over each floor server a rate should stay within")
	if err := fs.Parse(args); err != nil {
		return errFlags
	}
	c.NoScores = !*scores
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q: every setting is a flag (-h lists them)", fs.Arg(0))
	}
	var err error
	if c.Rates, err = parseRates(*rates); err != nil {
		return usageError{err}
	}
	if err := c.Check(); err != nil {
		return usageError{err}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program to start the servers: %v", err)
	}
	child := func(name string) func(context.Context, []string) *exec.Cmd {
		return func(ctx context.Context, args []string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, exe, append([]string{name}, args...)...)
			cmd.Env = append(os.Environ(), extloadChildEnv+"=1")
			return cmd
		}
	}
	c.Server, c.Feeder = child(extloadServerName), child(extloadFeederName)
	if err := extload.Benchmark(ctx, c, stdout, stderr); err != nil {
		return err
	}
	return nil
}
