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
	"strings"
	"syscall"
	"time"
)

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
