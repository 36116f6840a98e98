package extload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loadaware/loadaware-epp/bench/openai"
	"github.com/loadaware/loadaware-epp/bench/progress"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/gctune"
)

// The servers of a run: the picker and the two floors it is compared with.
const (
	ServerOurs    = "loadaware-epp"
	ServerNothing = "do-nothing"
	ServerPass    = "pass-through"
)

// Servers are the servers of a run, in the order the first round starts them.
var Servers = []string{ServerNothing, ServerPass, ServerOurs}

// Config is one extload run: every rate against every server, Rounds times. The fields are
// the command's flags, named in the errors Check returns.
type Config struct {
	Rates       []float64
	Rounds      int
	Duration    time.Duration
	Warmup      time.Duration
	BodyBytes   int
	Prompt      string // "ids" or "text"
	Endpoints   int
	Policy      string
	Tokenizer   string
	ServerProcs int
	MaxInFlight int
	Timeout     time.Duration
	Seed        uint64
	Progress    bool
	Profile     string // the picker process's CPU profile, if not ""
	Trace       string // the picker process's execution trace, if not ""
	P99Target   float64
	CPUTarget   time.Duration
	MemLimit    int64
	GCPercent   int
	Pin         bool
	Stall       time.Duration
	FlightDir   string
	NoScores    bool
	GenProfile  string  // this process's CPU profile, if not ""
	FeedRate    float64 // LMCache batches/s pushed to the picker during its windows; 0: none
	FeedEvents  int     // KV admit events per batch

	// Server returns the command that starts one server process with these arguments
	// (which ServerMain parses); it is how the caller names its own executable.
	Server func(ctx context.Context, args []string) *exec.Cmd
	// Feeder returns the command that starts the LMCache feeder's process with these
	// arguments (which FeederMain parses); needed when FeedRate is above 0.
	Feeder func(ctx context.Context, args []string) *exec.Cmd
}

// Check says which setting is out of range, by its flag name.
func (c Config) Check() error {
	switch {
	case len(c.Rates) == 0:
		return errors.New("-rates: pass at least one rate")
	case c.Duration <= 0 || c.Duration > 10*time.Minute:
		return fmt.Errorf("-duration %v: pass a window between 1ms and 10m", c.Duration)
	case c.Rounds < 1 || c.Rounds > 1000:
		return fmt.Errorf("-rounds %d: pass 1 to 1000", c.Rounds)
	case c.Warmup < 0 || c.Warmup > time.Minute:
		return fmt.Errorf("-warmup %v: pass 0 to 1m", c.Warmup)
	case c.BodyBytes < 64 || c.BodyBytes > 16<<20:
		return fmt.Errorf("-body-bytes %d: pass 64 to %d", c.BodyBytes, 16<<20)
	case c.Prompt != "ids" && c.Prompt != "text":
		return fmt.Errorf("-prompt %q: use ids or text", c.Prompt)
	case c.Endpoints < 1 || c.Endpoints > 10000:
		return fmt.Errorf("-endpoints %d: pass 1 to 10000", c.Endpoints)
	case c.ServerProcs < 0:
		return fmt.Errorf("-server-procs %d: pass 0 (the Go default) or more", c.ServerProcs)
	case c.MaxInFlight < 1:
		return fmt.Errorf("-max-inflight %d: pass at least 1", c.MaxInFlight)
	case c.MemLimit < 0:
		return fmt.Errorf("-server-memory-limit %d: pass a limit in bytes, or 0 for none", c.MemLimit)
	case c.GCPercent < 1:
		return fmt.Errorf("-server-gc-percent %d: use a GOGC of at least 1 (the picker's default is %d)", c.GCPercent, gctune.DefaultGCPercent)
	case c.Timeout <= 0:
		return fmt.Errorf("-timeout %v: pass a positive duration", c.Timeout)
	case c.Stall <= 0:
		return fmt.Errorf("-stall %v: pass a positive duration", c.Stall)
	case c.FeedRate < 0 || c.FeedRate > 100000:
		return fmt.Errorf("-lmcache-rate %v: pass 0 (none) to 100000 batches/s", c.FeedRate)
	case c.FeedEvents < 1 || c.FeedEvents > 50:
		return fmt.Errorf("-lmcache-batch %d: pass 1 to 50 events (LMCache 0.3.9 sends at most 50 per batch)", c.FeedEvents)
	case c.P99Target <= 0 || c.CPUTarget < 0:
		return errors.New("-p99-target must be positive and -cpu-target not negative")
	}
	for _, r := range c.Rates {
		if r > 100000 {
			return fmt.Errorf("-rates: %v req/s is over the 100000 this generator can schedule", r)
		}
	}
	return nil
}

// serverArgs are the arguments of server name's process (ServerMain's flags).
func (c Config) serverArgs(name string, cpu int) []string {
	args := []string{"-kind", name, "-procs", strconv.Itoa(c.ServerProcs),
		"-endpoints", strconv.Itoa(c.Endpoints), "-policy", c.Policy, "-tokenizer", c.Tokenizer}
	if cpu >= 0 {
		args = append(args, "-cpu", strconv.Itoa(cpu))
	}
	if c.FlightDir != "" {
		args = append(args, "-flight")
	}
	if name != ServerOurs {
		return args
	}
	if c.Profile != "" {
		args = append(args, "-cpuprofile", c.Profile)
	}
	if c.Trace != "" {
		args = append(args, "-trace", c.Trace)
	}
	if c.MemLimit > 0 {
		args = append(args, "-memory-limit", strconv.FormatInt(c.MemLimit, 10), "-gc-percent", strconv.Itoa(c.GCPercent))
	}
	if c.NoScores {
		args = append(args, "-endpoint-scores=false")
	}
	return args
}

// Benchmark starts the three servers in their own processes, runs every rate against each
// (rotating which goes first) and writes the report to stdout; the servers' logs and the
// progress go to stderr.
func Benchmark(ctx context.Context, c Config, stdout, stderr io.Writer) error {
	if err := c.Check(); err != nil {
		return err
	}
	stderr = LockedWriter(stderr) // the server processes' logs and the progress share it
	serverCPU, pinNote, err := PinGenerator(c.Pin)
	if err != nil {
		return err
	}
	defer pinNote.Restore()
	if c.GenProfile != "" {
		f, err := os.Create(c.GenProfile)
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
	if c.FlightDir != "" {
		if err := os.MkdirAll(c.FlightDir, 0o755); err != nil {
			return fmt.Errorf("-server-flight %s: %w (pass a directory this user can create or write)", c.FlightDir, err)
		}
		if genFlight, err = StartFlight(); err != nil {
			return fmt.Errorf("-server-flight: start the generator's flight recorder: %w", err)
		}
		defer genFlight.Stop()
	}
	servers := map[string]*Child{}
	defer func() {
		for _, ch := range servers {
			_ = ch.Close()
		}
	}()
	conns := map[string]extprocv3.ExternalProcessorClient{}
	for _, name := range Servers {
		cmd := c.Server(ctx, c.serverArgs(name, serverCPU))
		cmd.Stderr = stderr
		ch, err := StartChild(cmd, 30*time.Second)
		if err != nil {
			return err
		}
		servers[name] = ch
		conn, err := grpc.NewClient(ch.Addr, append(DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return fmt.Errorf("connect to the %s server at %s: %w", name, ch.Addr, err)
		}
		defer conn.Close()
		conns[name] = extprocv3.NewExternalProcessorClient(conn)
	}
	var fd *feed
	if c.FeedRate > 0 {
		if c.Feeder == nil {
			return errors.New("extload: -lmcache-rate needs Config.Feeder, the command of the feeder's process")
		}
		if fd, err = newFeed(ctx, c, servers[ServerOurs], stderr); err != nil {
			return err
		}
		defer fd.close()
	}
	req := Request{Path: extproc.PathCompletions, Body: openai.PaddedCompletion(c.BodyBytes, c.Prompt == "ids"),
		ResponseBody: []byte("data: {\"choices\":[{\"text\":\"ok\"}]}\n\ndata: [DONE]\n\n")}
	c.intro(stdout, len(req.Body), pinNote.Text, fd != nil)

	var arms []Arm
	for round := range c.Rounds {
		for i, rate := range c.Rates {
			// Rotate which server goes first, so drift in the machine's load falls on all.
			for k := range Servers {
				name := Servers[(k+i+round)%len(Servers)]
				m := Measure{Server: name, Rate: rate, Client: conns[name], Child: servers[name], Request: req,
					Window: WindowConfig{Rate: rate, Duration: c.Duration, Seed: c.Seed*1000 + uint64(round*len(c.Rates)+i), MaxInFlight: c.MaxInFlight, Timeout: c.Timeout},
					Warmup: c.Warmup}
				if fd != nil && name == ServerOurs {
					m.During = fd.start
				}
				bar := progress.New(stderr, fmt.Sprintf("%s at %.0f/s", name, rate), c.Progress)
				m.Window.Progress = bar.Update
				arm, err := MeasureWindow(ctx, m)
				bar.Finish()
				if err != nil {
					return err
				}
				if c.FlightDir != "" {
					if err := SnapshotStall(c.FlightDir, c.Stall, servers[name], genFlight, arm, round, stderr); err != nil {
						return err
					}
				}
				arms = Pool(arms, arm)
			}
		}
	}
	fmt.Fprintln(stdout, "Round trip: from a request's scheduled start to the server's end of its stream (headers, body, response")
	fmt.Fprintln(stdout, "headers and body, half-close). Request phase: request headers sent to the routing answer. CPU/request: the")
	fmt.Fprintln(stdout, "server process's getrusage CPU over the measured window / streams opened; the CPUs are as pinned above.")
	fmt.Fprintln(stdout)
	if err := WriteReport(stdout, arms, ServerOurs, []string{ServerNothing, ServerPass}, c.P99Target, c.CPUTarget); err != nil {
		return err
	}
	if err := WriteRoundRatios(stdout, arms, ServerOurs, []string{ServerNothing, ServerPass}, c.P99Target); err != nil {
		return err
	}
	if fd != nil {
		if err := fd.report(stdout); err != nil {
			return err
		}
	}
	return WriteStalls(stdout, arms, c.Stall)
}

// intro says what the run sends to what, and about how long it takes.
func (c Config) intro(w io.Writer, bodyLen int, pinned string, feeding bool) {
	fmt.Fprintf(w, "extload: %d-byte /v1/completions bodies (%s prompt), one ext_proc stream per request, full-duplex as Envoy;\n", bodyLen, c.Prompt)
	scores := "with"
	if c.NoScores {
		scores = "without"
	}
	fmt.Fprintf(w, "servers in child processes on loopback (GOMAXPROCS %d): %s (policy %s, %d endpoints, %s endpoint scores), %s and %s\n",
		c.ServerProcs, ServerOurs, c.Policy, c.Endpoints, scores, ServerNothing, ServerPass)
	fmt.Fprintf(w, "the generator's HTTP/2 windows are Envoy's defaults (%d MiB).\n", EnvoyHTTP2Window>>20)
	fmt.Fprintf(w, "(%s continues every message; %s also sends each body back, as Envoy's full-duplex mode needs).\n", ServerNothing, ServerPass)
	fmt.Fprintln(w, pinned)
	if feeding {
		fmt.Fprintf(w, "LMCache ingestion: an engine's worker pushes %v batches/s of %d KV admit events (new keys) to the picker's controller during its windows.\n", c.FeedRate, c.FeedEvents)
		fmt.Fprintln(w, "(the worker runs in a process of its own with the generator's CPU affinity: its CPU time is in neither the generator's columns nor the picker's.)")
	}
	if c.MemLimit > 0 {
		fmt.Fprintf(w, "the picker's memory limit: %d bytes, GOGC %d (as in a container; -server-memory-limit, -server-gc-percent).\n", c.MemLimit, c.GCPercent)
	}
	perWindow := c.Warmup + c.Duration
	fmt.Fprintf(w, "rates %v req/s, %d round(s) of %v measured after %v warm-up per rate and server: about %v.\n\n",
		c.Rates, c.Rounds, c.Duration, c.Warmup, (time.Duration(len(Servers)*len(c.Rates)*c.Rounds) * perWindow).Round(time.Second))
}

// The child-process protocol. A server runs alone in a child process so that its CPU time
// is its own: the child prints "listening ADDR" on stdout once it serves (ADDR may be
// followed by space-separated NAME=VALUE fields: other addresses the server listens on,
// e.g. "lmcache=HOST:PORT", its LMCache pull socket), then answers
// every "cpu" line on stdin with "cpu NS", the CPU time (user + system, every thread) the
// process has used so far, from getrusage(RUSAGE_SELF), and every "snapshot PATH" line with
// "snapshot ok" once it has written what its snapshot function keeps (an execution trace of
// the last seconds, from a flight recorder) to PATH, or "snapshot error MSG". When stdin
// closes (the parent ended or died) the child stops its server and exits.

// ServeChild is the child's side: start starts the server and returns its address (the
// rest of the "listening" line: it may be followed by NAME=VALUE fields) and a function
// that stops it; ServeChild then speaks the protocol on in and out until in ends.
// snapshot writes the child's snapshot to a path; nil answers every snapshot request
// with an error.
func ServeChild(ctx context.Context, in io.Reader, out io.Writer, start func(context.Context) (addr string, stop func() error, err error), snapshot func(path string) error) error {
	addr, stop, err := start(ctx)
	if err != nil {
		return err
	}
	defer stop()
	if _, err := fmt.Fprintf(out, "listening %s\n", addr); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if path, ok := strings.CutPrefix(sc.Text(), "snapshot "); ok {
			answer := "snapshot ok"
			switch {
			case snapshot == nil:
				answer = "snapshot error this server keeps no snapshot (start it with -flight)"
			case path == "":
				answer = "snapshot error no path given"
			default:
				if err := snapshot(path); err != nil {
					answer = "snapshot error " + strings.ReplaceAll(err.Error(), "\n", " ")
				}
			}
			if _, err := fmt.Fprintln(out, answer); err != nil {
				return err
			}
			continue
		}
		if sc.Text() != "cpu" {
			return fmt.Errorf("extload child: unknown request %q (the protocol has \"cpu\" and \"snapshot PATH\")", sc.Text())
		}
		u, err := ReadUsage()
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, usageFormat+"\n", u.CPU.Nanoseconds(), u.GCCPU.Nanoseconds(), u.GCs, u.AllocBytes); err != nil {
			return err
		}
	}
	return sc.Err()
}

// usageFormat is the child's answer to "cpu": Usage's fields, in nanoseconds and counts.
const usageFormat = "cpu %d gc-cpu %d gcs %d alloc-bytes %d"

// Usage is what a process has used so far.
type Usage struct {
	CPU        time.Duration // user + system CPU time, every thread (getrusage)
	GCCPU      time.Duration // the Go runtime's estimate of the CPU time its collector took
	GCs        uint64        // completed collection cycles
	AllocBytes uint64        // bytes allocated on the heap
}

// Sub is u less an earlier reading.
func (u Usage) Sub(earlier Usage) Usage {
	return Usage{CPU: u.CPU - earlier.CPU, GCCPU: u.GCCPU - earlier.GCCPU, GCs: u.GCs - earlier.GCs, AllocBytes: u.AllocBytes - earlier.AllocBytes}
}

// usageMetrics are the runtime/metrics Usage reads, in its order.
var usageMetrics = []string{"/cpu/classes/gc/total:cpu-seconds", "/gc/cycles/total:gc-cycles", "/gc/heap/allocs:bytes"}

// ReadUsage is this process's Usage so far.
func ReadUsage() (Usage, error) {
	cpu, err := ProcessCPU()
	if err != nil {
		return Usage{}, err
	}
	samples := make([]metrics.Sample, len(usageMetrics))
	for i, name := range usageMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	return Usage{CPU: cpu, GCCPU: time.Duration(samples[0].Value.Float64() * float64(time.Second)),
		GCs: samples[1].Value.Uint64(), AllocBytes: samples[2].Value.Uint64()}, nil
}

// ProcessCPU is this process's user + system CPU time so far (every thread).
func ProcessCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("extload: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Child is the parent's handle on a server in a child process.
type Child struct {
	Addr  string            // the server's address
	Attrs map[string]string // the NAME=VALUE fields after it on the "listening" line
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	done  chan error // the process's exit
}

// StartChild runs cmd (which must run ServeChild) and waits, at most timeout, for its
// address. The child's stderr goes to the parent's unless cmd sets it.
func StartChild(cmd *exec.Cmd, timeout time.Duration) (*Child, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the server process %s: %w", cmd.Path, err)
	}
	c := &Child{cmd: cmd, in: in, out: bufio.NewReader(outPipe), done: make(chan error, 1)}
	line := make(chan string, 1)
	go func() {
		l, _ := c.out.ReadString('\n')
		line <- l
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l := <-line:
		addr, attrs, err := parseListening(l)
		if err != nil {
			_ = c.kill()
			return nil, fmt.Errorf("the server process %s %w (its log is above)", cmd.Path, err)
		}
		c.Addr, c.Attrs = addr, attrs
	case <-t.C:
		_ = c.kill()
		return nil, fmt.Errorf("the server process %s gave no address within %v", cmd.Path, timeout)
	}
	go func() { c.done <- cmd.Wait() }()
	return c, nil
}

// parseListening reads the child's first line: "listening ADDR [NAME=VALUE ...]".
func parseListening(l string) (string, map[string]string, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(l), "listening ")
	fields := strings.Fields(rest)
	if !ok || len(fields) == 0 {
		return "", nil, fmt.Errorf("said %q instead of its address", strings.TrimSpace(l))
	}
	attrs := map[string]string{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" || v == "" {
			return "", nil, fmt.Errorf("said %q: %q after its address is not NAME=VALUE", strings.TrimSpace(l), f)
		}
		attrs[k] = v
	}
	return fields[0], attrs, nil
}

// ask sends the child one request line and returns its answer line, trimmed; what names
// the request in an error.
func (c *Child) ask(request, what string) (string, error) {
	if _, err := io.WriteString(c.in, request+"\n"); err != nil {
		return "", fmt.Errorf("ask the server process for %s: %w", what, err)
	}
	l, err := c.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read the server process's answer about %s: %w", what, err)
	}
	return strings.TrimSpace(l), nil
}

// Usage asks the child for what it has used so far.
func (c *Child) Usage() (Usage, error) {
	l, err := c.ask("cpu", "its CPU time")
	if err != nil {
		return Usage{}, err
	}
	return parseUsage(l)
}

// parseUsage reads the child's answer to "cpu".
func parseUsage(l string) (Usage, error) {
	var cpu, gc int64
	var u Usage
	if n, err := fmt.Sscanf(l, usageFormat, &cpu, &gc, &u.GCs, &u.AllocBytes); err != nil || n != 4 || cpu < 0 || gc < 0 {
		return Usage{}, fmt.Errorf("the server process answered %q to a CPU request (want %q)", l, usageFormat)
	}
	u.CPU, u.GCCPU = time.Duration(cpu), time.Duration(gc)
	return u, nil
}

// Snapshot asks the child to write its snapshot (see ServeChild) to path, and waits for it.
func (c *Child) Snapshot(path string) error {
	if strings.ContainsAny(path, "\n\r") {
		return fmt.Errorf("snapshot path %q has a line break: the child protocol is one line per request", path)
	}
	l, err := c.ask("snapshot "+path, "a snapshot")
	if err != nil {
		return err
	}
	switch {
	case l == "snapshot ok":
		return nil
	case strings.HasPrefix(l, "snapshot error "):
		return fmt.Errorf("the server process could not write its snapshot to %s: %s", path, strings.TrimPrefix(l, "snapshot error "))
	}
	return fmt.Errorf("the server process answered %q to a snapshot request", l)
}

// Close closes the child's stdin, which stops it, and waits at most 5 s for it to exit
// before killing it.
func (c *Child) Close() error {
	_ = c.in.Close()
	select {
	case err := <-c.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("the server process %s ended badly: %w", c.cmd.Path, err)
		}
		return err
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("the server process %s did not stop within 5s of its stdin closing; killed", c.cmd.Path)
	}
}

func (c *Child) kill() error {
	_ = c.cmd.Process.Kill()
	return c.cmd.Wait()
}
