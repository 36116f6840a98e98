package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loadaware/loadaware-epp/bench/extload"
	"github.com/loadaware/loadaware-epp/bench/openai"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/gctune"
)

func init() {
	register(command{name: "extload", summary: "open-loop ext_proc load on the picker beside a do-nothing and a pass-through ext_proc server: latency and CPU ratios", run: runExtload})
	register(command{name: extloadServerName, summary: "(started by extload) one ext_proc server in its own process, on loopback", run: runExtloadServer})
}

const extloadServerName = "extload-server"

// extloadChildEnv marks a process started as an extload server; a test binary (which is
// os.Executable in tests) dispatches on it in TestMain.
const extloadChildEnv = "LOADAWARE_BENCH_EXTLOAD_SERVER"

// The servers of a run: the picker and the two floors it is compared with.
const (
	serverOurs    = "loadaware-epp"
	serverNothing = "do-nothing"
	serverPass    = "pass-through"
)

// extloadServers are the servers of a run, in the order the first round starts them.
var extloadServers = []string{serverNothing, serverPass, serverOurs}

type extloadConfig struct {
	rates       []float64
	rounds      int
	duration    time.Duration
	warmup      time.Duration
	bodyBytes   int
	prompt      string
	endpoints   int
	policy      string
	tokenizer   string
	serverProcs int
	maxInFlight int
	timeout     time.Duration
	seed        uint64
	progress    bool
	profile     string
	trace       string
	p99Target   float64
	cpuTarget   time.Duration
	memLimit    int64
	gcPercent   int
	pin         bool
	stall       time.Duration
	flightDir   string
	noScores    bool
	genProfile  string
	feedRate    float64 // LMCache batches/s pushed to the picker during its windows; 0: none
	feedEvents  int     // KV admit events per batch
}

func runExtload(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c extloadConfig
	var rates string
	fs := flag.NewFlagSet("extload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&rates, "rates", "500,1000,2000", "open-loop rates, requests/s, each run against both servers")
	fs.IntVar(&c.rounds, "rounds", 1, "times the rates are run (servers alternating first); each server's windows at a rate are pooled, and 3 or more give the p99 ratio a bootstrap interval over them")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "measured window per rate, server and round")
	fs.DurationVar(&c.warmup, "warmup", 500*time.Millisecond, "unmeasured window at the same rate before each measured one")
	fs.IntVar(&c.bodyBytes, "body-bytes", 8192, "request body size (64 B to 16 MiB)")
	fs.StringVar(&c.prompt, "prompt", "ids", "prompt form: ids (token ids) or text (tokenized when -tokenizer is given, else routed on load alone)")
	fs.IntVar(&c.endpoints, "endpoints", 2, "static endpoints the picker routes between (1 to 10000; never contacted)")
	fs.StringVar(&c.policy, "policy", "loadaware", "the picker's policy")
	scores := fs.Bool("endpoint-scores", true, "the picker's --endpoint-scores: the candidates' scores and the reason in each answer's dynamic metadata")
	fs.StringVar(&c.tokenizer, "tokenizer", "", "tokenizer.json or model directory for the picker (text prompts)")
	fs.IntVar(&c.serverProcs, "server-procs", 1, "GOMAXPROCS of each server process (0: the Go default)")
	fs.IntVar(&c.maxInFlight, "max-inflight", 2048, "streams open at once; arrivals beyond are shed and counted")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "longest one stream may take")
	fs.Uint64Var(&c.seed, "seed", 1, "arrival-time seed")
	fs.BoolVar(&c.progress, "progress", true, "show progress on stderr")
	fs.IntVar(&c.gcPercent, "server-gc-percent", gctune.DefaultGCPercent, "the picker's --gc-percent: its GOGC under -server-memory-limit")
	fs.Int64Var(&c.memLimit, "server-memory-limit", 0, "the picker's --memory-limit in bytes, as in a container (GOGC is then its --gc-percent default); 0: none, as outside one")
	fs.StringVar(&c.profile, "server-cpuprofile", "", "write a CPU profile of the picker's server process to this file (go tool pprof)")
	fs.StringVar(&c.genProfile, "generator-cpuprofile", "", "write a CPU profile of the load generator (this process) to this file (go tool pprof)")
	fs.StringVar(&c.trace, "server-trace", "", "write an execution trace of the picker's server process to this file (go tool trace)")
	fs.Float64Var(&c.p99Target, "p99-target", 1.3, "p99 round-trip ratio to each floor server a rate should stay within")
	fs.BoolVar(&c.pin, "pin", true, "pin each server process to one CPU (the last this process may use) and the generator to the others, as a server on its own core beside Envoy; with one CPU, or -pin=false, all share every CPU")
	fs.DurationVar(&c.stall, "stall", 50*time.Millisecond, "a round trip longer than this is a stall: the report counts each server's windows with one")
	fs.StringVar(&c.flightDir, "server-flight", "", "run a flight recorder in every server and, after a window with a stall, write its last seconds' execution trace to this directory (go tool trace)")
	fs.Float64Var(&c.feedRate, "lmcache-rate", 0, "LMCache batches per second an engine's worker pushes to the picker's controller during the picker's windows (Poisson-timed, from the generator's CPU), so it ingests while it decides; 0: none")
	fs.IntVar(&c.feedEvents, "lmcache-batch", 7, "KV admit events per LMCache batch (1 to 50; 7 is one 1,578-token prompt's chunks of 256)")
	fs.DurationVar(&c.cpuTarget, "cpu-target", 100*time.Microsecond, "extra CPU per request over each floor server a rate should stay within")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.noScores = !*scores
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loadaware-bench extload: unexpected argument %q: every setting is a flag (-h lists them)\n", fs.Arg(0))
		return 2
	}
	var err error
	if c.rates, err = parseRates(rates); err != nil {
		fmt.Fprintf(stderr, "loadaware-bench extload: %v\n", err)
		return 2
	}
	if err := c.check(); err != nil {
		fmt.Fprintf(stderr, "loadaware-bench extload: %v\n", err)
		return 2
	}
	if err := extloadRun(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "loadaware-bench extload: %v\n", err)
		return 1
	}
	return 0
}

func (c extloadConfig) check() error {
	switch {
	case c.duration <= 0 || c.duration > 10*time.Minute:
		return fmt.Errorf("-duration %v: pass a window between 1ms and 10m", c.duration)
	case c.rounds < 1 || c.rounds > 1000:
		return fmt.Errorf("-rounds %d: pass 1 to 1000", c.rounds)
	case c.warmup < 0 || c.warmup > time.Minute:
		return fmt.Errorf("-warmup %v: pass 0 to 1m", c.warmup)
	case c.bodyBytes < 64 || c.bodyBytes > 16<<20:
		return fmt.Errorf("-body-bytes %d: pass 64 to %d", c.bodyBytes, 16<<20)
	case c.prompt != "ids" && c.prompt != "text":
		return fmt.Errorf("-prompt %q: use ids or text", c.prompt)
	case c.endpoints < 1 || c.endpoints > 10000:
		return fmt.Errorf("-endpoints %d: pass 1 to 10000", c.endpoints)
	case c.serverProcs < 0:
		return fmt.Errorf("-server-procs %d: pass 0 (the Go default) or more", c.serverProcs)
	case c.maxInFlight < 1:
		return fmt.Errorf("-max-inflight %d: pass at least 1", c.maxInFlight)
	case c.memLimit < 0:
		return fmt.Errorf("-server-memory-limit %d: pass a limit in bytes, or 0 for none", c.memLimit)
	case c.gcPercent < 1:
		return fmt.Errorf("-server-gc-percent %d: use a GOGC of at least 1 (the picker's default is %d)", c.gcPercent, gctune.DefaultGCPercent)
	case c.timeout <= 0:
		return fmt.Errorf("-timeout %v: pass a positive duration", c.timeout)
	case c.stall <= 0:
		return fmt.Errorf("-stall %v: pass a positive duration", c.stall)
	case c.feedRate < 0 || c.feedRate > 100000:
		return fmt.Errorf("-lmcache-rate %v: pass 0 (none) to 100000 batches/s", c.feedRate)
	case c.feedEvents < 1 || c.feedEvents > 50:
		return fmt.Errorf("-lmcache-batch %d: pass 1 to 50 events (LMCache 0.3.9 sends at most 50 per batch)", c.feedEvents)
	case c.p99Target <= 0 || c.cpuTarget < 0:
		return errors.New("-p99-target must be positive and -cpu-target not negative")
	}
	for _, r := range c.rates {
		if r > 100000 {
			return fmt.Errorf("-rates: %v req/s is over the 100000 this generator can schedule", r)
		}
	}
	return nil
}

func extloadRun(ctx context.Context, c extloadConfig, stdout, stderr io.Writer) error {
	stderr = extload.LockedWriter(stderr) // the server processes' logs and the progress share it
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program to start the servers: %w", err)
	}
	serverCPU, pinNote, err := extload.PinGenerator(c.pin)
	if err != nil {
		return err
	}
	defer pinNote.Restore()
	if c.genProfile != "" {
		f, err := os.Create(c.genProfile)
		if err != nil {
			return fmt.Errorf("-generator-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-generator-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var genFlight *trace.FlightRecorder
	if c.flightDir != "" {
		if err := os.MkdirAll(c.flightDir, 0o755); err != nil {
			return fmt.Errorf("-server-flight %s: %w (pass a directory this user can create or write)", c.flightDir, err)
		}
		if genFlight, err = extload.StartFlight(); err != nil {
			return fmt.Errorf("-server-flight: start the generator's flight recorder: %w", err)
		}
		defer genFlight.Stop()
	}
	servers := map[string]*extload.Child{}
	defer func() {
		for _, ch := range servers {
			_ = ch.Close()
		}
	}()
	conns := map[string]extprocv3.ExternalProcessorClient{}
	for _, name := range extloadServers {
		args := []string{extloadServerName, "-kind", name, "-procs", strconv.Itoa(c.serverProcs),
			"-endpoints", strconv.Itoa(c.endpoints), "-policy", c.policy, "-tokenizer", c.tokenizer}
		if serverCPU >= 0 {
			args = append(args, "-cpu", strconv.Itoa(serverCPU))
		}
		if name == serverOurs && c.profile != "" {
			args = append(args, "-cpuprofile", c.profile)
		}
		if name == serverOurs && c.trace != "" {
			args = append(args, "-trace", c.trace)
		}
		if name == serverOurs && c.memLimit > 0 {
			args = append(args, "-memory-limit", strconv.FormatInt(c.memLimit, 10), "-gc-percent", strconv.Itoa(c.gcPercent))
		}
		if c.flightDir != "" {
			args = append(args, "-flight")
		}
		if name == serverOurs && c.noScores {
			args = append(args, "-endpoint-scores=false")
		}
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Env = append(os.Environ(), extloadChildEnv+"=1")
		cmd.Stderr = stderr
		ch, err := extload.StartChild(cmd, 30*time.Second)
		if err != nil {
			return err
		}
		servers[name] = ch
		conn, err := grpc.NewClient(ch.Addr, append(extload.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return fmt.Errorf("connect to the %s server at %s: %w", name, ch.Addr, err)
		}
		defer conn.Close()
		conns[name] = extprocv3.NewExternalProcessorClient(conn)
	}
	var feed *extloadFeed
	if c.feedRate > 0 {
		if feed, err = newExtloadFeed(c, servers[serverOurs]); err != nil {
			return err
		}
		defer feed.close()
	}
	req := extload.Request{Path: extproc.PathCompletions, Body: openai.PaddedCompletion(c.bodyBytes, c.prompt == "ids"),
		ResponseBody: []byte("data: {\"choices\":[{\"text\":\"ok\"}]}\n\ndata: [DONE]\n\n")}
	perWindow := c.warmup + c.duration
	fmt.Fprintf(stdout, "extload: %d-byte /v1/completions bodies (%s prompt), one ext_proc stream per request, full-duplex as Envoy;\n", len(req.Body), c.prompt)
	scores := "with"
	if c.noScores {
		scores = "without"
	}
	fmt.Fprintf(stdout, "servers in child processes on loopback (GOMAXPROCS %d): %s (policy %s, %d endpoints, %s endpoint scores), %s and %s\n",
		c.serverProcs, serverOurs, c.policy, c.endpoints, scores, serverNothing, serverPass)
	fmt.Fprintf(stdout, "the generator's HTTP/2 windows are Envoy's defaults (%d MiB).\n", extload.EnvoyHTTP2Window>>20)
	fmt.Fprintf(stdout, "(%s continues every message; %s also sends each body back, as Envoy's full-duplex mode needs).\n", serverNothing, serverPass)
	fmt.Fprintln(stdout, pinNote.Text)
	if feed != nil {
		fmt.Fprintf(stdout, "LMCache ingestion: an engine's worker pushes %v batches/s of %d KV admit events (new keys) to the picker's controller during its windows.\n", c.feedRate, c.feedEvents)
	}
	if c.memLimit > 0 {
		fmt.Fprintf(stdout, "the picker's memory limit: %d bytes, GOGC %d (as in a container; -server-memory-limit, -server-gc-percent).\n", c.memLimit, c.gcPercent)
	}
	fmt.Fprintf(stdout, "rates %v req/s, %d round(s) of %v measured after %v warm-up per rate and server: about %v.\n\n",
		c.rates, c.rounds, c.duration, c.warmup, (time.Duration(len(extloadServers)*len(c.rates)*c.rounds) * perWindow).Round(time.Second))

	var arms []extload.Arm
	for round := range c.rounds {
		for i, rate := range c.rates {
			// Rotate which server goes first, so drift in the machine's load falls on all.
			for k := range extloadServers {
				name := extloadServers[(k+i+round)%len(extloadServers)]
				var f *extloadFeed
				if name == serverOurs {
					f = feed
				}
				m := extload.Measure{Server: name, Rate: rate, Client: conns[name], Child: servers[name], Request: req,
					Window: extload.WindowConfig{Rate: rate, Duration: c.duration, Seed: c.seed*1000 + uint64(round*len(c.rates)+i), MaxInFlight: c.maxInFlight, Timeout: c.timeout},
					Warmup: c.warmup}
				if f != nil {
					m.During = func(ctx context.Context) func() error { return f.start(ctx, c.feedRate, c.feedEvents) }
				}
				bar := newProgressBar(stderr, fmt.Sprintf("%s at %.0f/s", name, rate), c.progress)
				m.Window.Progress = bar.update
				arm, err := extload.MeasureWindow(ctx, m)
				bar.finish()
				if err != nil {
					return err
				}
				if c.flightDir != "" {
					if err := extload.SnapshotStall(c.flightDir, c.stall, servers[name], genFlight, arm, round, stderr); err != nil {
						return err
					}
				}
				arms = extload.Pool(arms, arm)
			}
		}
	}
	fmt.Fprintln(stdout, "Round trip: from a request's scheduled start to the server's end of its stream (headers, body, response")
	fmt.Fprintln(stdout, "headers and body, half-close). Request phase: request headers sent to the routing answer. CPU/request: the")
	fmt.Fprintln(stdout, "server process's getrusage CPU over the measured window / streams opened; the CPUs are as pinned above.")
	fmt.Fprintln(stdout)
	if err := extload.WriteReport(stdout, arms, serverOurs, []string{serverNothing, serverPass}, c.p99Target, c.cpuTarget); err != nil {
		return err
	}
	if feed != nil {
		if err := feed.report(stdout); err != nil {
			return err
		}
	}
	return extload.WriteStalls(stdout, arms, c.stall)
}

// runExtloadServer is the child side: one server on a loopback port, speaking extload's
// child protocol on stdin and stdout.
func runExtloadServer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(extloadServerName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	kind := fs.String("kind", serverNothing, "which server: "+strings.Join(extloadServers, ", "))
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
	if !slices.Contains(extloadServers, *kind) {
		fmt.Fprintf(stderr, "%s: -kind %q: use one of %s\n", extloadServerName, *kind, strings.Join(extloadServers, ", "))
		return 2
	}
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	if *cpu >= 0 {
		if _, err := extload.Pin([]int{*cpu}); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", extloadServerName, err)
			return 1
		}
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", extloadServerName, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "%s: start the CPU profile: %v\n", extloadServerName, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if *traceTo != "" {
		f, err := os.Create(*traceTo)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", extloadServerName, err)
			return 1
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			fmt.Fprintf(stderr, "%s: start the execution trace: %v\n", extloadServerName, err)
			return 1
		}
		defer trace.Stop()
	}
	var start func(context.Context) (string, func() error, error)
	switch *kind {
	case serverNothing:
		start = func(context.Context) (string, func() error, error) { return extload.ServeFloor(extload.Nothing{}) }
	case serverPass:
		start = func(context.Context) (string, func() error, error) { return extload.ServeFloor(extload.PassThrough{}) }
	case serverOurs:
		if *memLimit > 0 {
			gctune.Apply(gctune.Plan(os.Getenv, 0, *gcPercent, *memLimit))
		}
		start = func(ctx context.Context) (string, func() error, error) {
			return extload.StartPicker(ctx, *endpoints, *policy, *tok, !*scores, stderr)
		}
	}
	var snapshot func(string) error
	if *flight {
		fr, err := extload.StartFlight()
		if err != nil {
			fmt.Fprintf(stderr, "%s: start the flight recorder: %v\n", extloadServerName, err)
			return 1
		}
		defer fr.Stop()
		snapshot = func(path string) error { return extload.WriteFlight(fr, path) }
	}
	if err := extload.ServeChild(ctx, os.Stdin, stdout, start, snapshot); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", extloadServerName, err)
		return 1
	}
	return 0
}
