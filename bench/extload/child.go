package extload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The child-process protocol. A server runs alone in a child process so that its CPU time
// is its own: the child prints "listening ADDR" on stdout once it serves, then answers
// every "cpu" line on stdin with "cpu NS", the CPU time (user + system, every thread) the
// process has used so far, from getrusage(RUSAGE_SELF). When stdin closes (the parent ended
// or died) the child stops its server and exits.

// ServeChild is the child's side: start starts the server and returns its address and a
// function that stops it; ServeChild then speaks the protocol on in and out until in ends.
func ServeChild(ctx context.Context, in io.Reader, out io.Writer, start func(context.Context) (addr string, stop func() error, err error)) error {
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
		if sc.Text() != "cpu" {
			return fmt.Errorf("extload child: unknown request %q (the protocol has only \"cpu\")", sc.Text())
		}
		ns, err := selfCPU()
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, "cpu %d\n", ns); err != nil {
			return err
		}
	}
	return sc.Err()
}

// selfCPU is the process's user + system CPU time so far, in nanoseconds.
func selfCPU() (int64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("extload child: getrusage: %w", err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), nil
}

// Child is the parent's handle on a server in a child process.
type Child struct {
	Addr string // the server's address
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	done chan error // the process's exit
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
		addr, ok := strings.CutPrefix(strings.TrimSpace(l), "listening ")
		if !ok {
			_ = c.kill()
			return nil, fmt.Errorf("the server process %s said %q instead of its address (its log is above)", cmd.Path, strings.TrimSpace(l))
		}
		c.Addr = addr
	case <-t.C:
		_ = c.kill()
		return nil, fmt.Errorf("the server process %s gave no address within %v", cmd.Path, timeout)
	}
	go func() { c.done <- cmd.Wait() }()
	return c, nil
}

// CPU asks the child for the CPU time it has used so far.
func (c *Child) CPU() (time.Duration, error) {
	if _, err := io.WriteString(c.in, "cpu\n"); err != nil {
		return 0, fmt.Errorf("ask the server process for its CPU time: %w", err)
	}
	l, err := c.out.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("read the server process's CPU time: %w", err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(l), "cpu ")
	ns, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("the server process answered %q to a CPU request", strings.TrimSpace(l))
	}
	return time.Duration(ns), nil
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
