package extload

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/lmworker"
	"github.com/loadaware/loadaware-epp/bench/promtext"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/zmqwait"
	zmq "github.com/pebbe/zmq4"
)

// Feeder plays an engine's LMCache worker beside the load, so the picker ingests cache
// events while it decides, as it does in a fleet: a ZeroMQ PUSH socket connected from the
// engine's IP to the picker's LMCache pull address, a RegisterMsg first, then multipart
// batches of KV admit events of new keys at Poisson-timed instants while Feed runs.
//
// A Feeder is used by one goroutine at a time. Sends never block: a batch the socket will not
// take at once (its queue full, or the picker not yet connected) is counted as dropped, so
// the generator's own timing is never held up by the feeder.
type Feeder struct {
	zctx     *zmq.Context
	sock     *zmq.Socket
	instance string
	rng      *rand.Rand
	frames   [][]byte
}

// FeedCounts is what Feed did.
type FeedCounts struct {
	Batches, Events, Dropped int // batches and their events sent; batches the socket refused
}

// NewFeeder connects a PUSH socket from ip (one of 127.0.0.0/8, all local on Linux, so the
// picker sees it as the peer: lmworker.Dial) to pullAddr (host:port) and queues the instance's
// RegisterMsg; seed seeds the keys.
func NewFeeder(ip, pullAddr, instance string, seed uint64) (*Feeder, error) {
	zctx, sock, err := lmworker.Dial(ip, pullAddr)
	if err != nil {
		return nil, fmt.Errorf("extload: the LMCache feeder: %w", err)
	}
	f := &Feeder{zctx: zctx, sock: sock, instance: instance, rng: rand.New(rand.NewPCG(seed, 0xfeed))}
	url := ip + ":0"
	reg, err := lmcache.Encode(lmcache.RegisterMsg{InstanceID: instance, IP: ip, Port: 8001, DistributedURL: &url})
	if err == nil {
		// The socket queues it until the connection is up (no DONTWAIT here: nothing is
		// connected yet, and a PUSH socket without a peer would refuse it).
		_, err = sock.SendBytes(reg, 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("extload: the LMCache feeder's RegisterMsg: %w", err)
	}
	return f, nil
}

// Feed sends batches of events KV admit events (1 to 50, LMCache 0.3.9's most per batch) at
// rate batches per second, Poisson-timed, until ctx ends.
func (f *Feeder) Feed(ctx context.Context, rate float64, events int) (FeedCounts, error) {
	var n FeedCounts
	if rate <= 0 || events < 1 || events > 50 {
		return n, fmt.Errorf("extload: feed %v batches/s of %d events: pass a positive rate and 1 to 50 events", rate, events)
	}
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	next := time.Now()
	for {
		next = next.Add(time.Duration(f.rng.ExpFloat64() / rate * float64(time.Second)))
		t.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return n, nil
		case <-t.C:
		}
		f.frames = f.frames[:0]
		for range events {
			b, err := lmcache.Encode(lmcache.KVAdmitMsg{InstanceID: f.instance, Key: int64(f.rng.Uint64()), Location: "LocalCPUBackend"})
			if err != nil {
				return n, fmt.Errorf("extload: encode a KV admit event: %w", err)
			}
			f.frames = append(f.frames, b)
		}
		_, err := f.sock.SendMessageDontwait(f.frames) // a [][]byte is sent as its frames
		switch {
		case err == nil:
			n.Batches++
			n.Events += events
		case zmqwait.IsAgain(err): // the socket would not take it now
			n.Dropped++
		default:
			return n, fmt.Errorf("extload: push a batch of KV events: %w", err)
		}
	}
}

// Close closes the socket, dropping what it still queues, and ends the context.
func (f *Feeder) Close() error {
	return errors.Join(f.sock.Close(), f.zctx.Term())
}

// FeederMain is the feeder's process (Benchmark starts it through Config.Feeder): the
// engine's worker runs in a process of its own, as it would on an engine's machine, so
// that its sends, its ZeroMQ I/O thread and their wake-ups are neither on the generator's Go
// scheduler nor in its CPU time. It parses the arguments newFeed passes, connects a Feeder
// and speaks the feeder protocol on stdin and stdout: it prints "listening feeder" once
// connected, then answers each "start" line with "started" and feeds until the next "stop"
// line, which it answers with the counts of what it fed and the CPU time its process has
// used so far ("fed BATCHES EVENTS DROPPED cpu NS") or "feed-error MSG". When stdin ends it
// stops and exits. name prefixes its errors; it returns the process's exit code.
func FeederMain(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	ip := fs.String("ip", EndpointIP(0), "the engine's IP, in 127.0.0.0/8, to connect from")
	pull := fs.String("pull", "", "the picker's LMCache pull address, host:port")
	instance := fs.String("instance", "extload-engine-0", "the worker's LMCache instance id")
	seed := fs.Uint64("seed", 1, "seeds the keys and the send times")
	rate := fs.Float64("rate", 0, "batches per second while started")
	events := fs.Int("events", 7, "KV admit events per batch (1 to 50)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *pull == "" || *rate <= 0 || *events < 1 || *events > 50 {
		fmt.Fprintf(stderr, "%s: -pull %q -rate %v -events %d: pass the picker's pull address, a positive rate and 1 to 50 events\n", name, *pull, *rate, *events)
		return 2
	}
	f, err := NewFeeder(*ip, *pull, *instance, *seed)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	defer f.Close()
	if err := serveFeed(ctx, f, *rate, *events, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// serveFeed speaks the feeder protocol (see FeederMain) for f until in ends.
func serveFeed(ctx context.Context, f *Feeder, rate float64, events int, in io.Reader, out io.Writer) error {
	if _, err := fmt.Fprintln(out, "listening feeder"); err != nil {
		return err
	}
	var stop func() (FeedCounts, error)
	defer func() {
		if stop != nil {
			_, _ = stop()
		}
	}()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var answer string
		switch l := sc.Text(); {
		case l == "start" && stop == nil:
			stop = startFeed(ctx, f, rate, events)
			answer = "started"
		case l == "stop" && stop != nil:
			n, err := stop()
			stop = nil
			cpu, cerr := ProcessCPU()
			answer = fmt.Sprintf(fedFormat, n.Batches, n.Events, n.Dropped, cpu.Nanoseconds())
			if err = errors.Join(err, cerr); err != nil {
				answer = "feed-error " + strings.ReplaceAll(err.Error(), "\n", " ")
			}
		default:
			return fmt.Errorf("extload feeder: request %q out of turn (the protocol alternates \"start\" and \"stop\", starting with \"start\")", l)
		}
		if _, err := fmt.Fprintln(out, answer); err != nil {
			return err
		}
	}
	return sc.Err()
}

// fedFormat is the feeder's answer to "stop": FeedCounts' fields, then the process's CPU
// time so far in nanoseconds.
const fedFormat = "fed %d %d %d cpu %d"

// parseFed reads the feeder's answer to "stop": what it fed, and its process's CPU time.
func parseFed(l string) (FeedCounts, time.Duration, error) {
	if msg, ok := strings.CutPrefix(l, "feed-error "); ok {
		return FeedCounts{}, 0, fmt.Errorf("the LMCache feeder's process: %s", msg)
	}
	var n FeedCounts
	var cpu int64
	if k, err := fmt.Sscanf(l, fedFormat, &n.Batches, &n.Events, &n.Dropped, &cpu); err != nil || k != 4 || n.Batches < 0 || n.Events < 0 || n.Dropped < 0 || cpu < 0 ||
		fmt.Sprintf(fedFormat, n.Batches, n.Events, n.Dropped, cpu) != l {
		return FeedCounts{}, 0, fmt.Errorf("the LMCache feeder's process answered %q to stop (want %q)", l, fedFormat)
	}
	return n, time.Duration(cpu), nil
}

// startFeed feeds f on a goroutine until the returned stop is called, which returns what
// was fed.
func startFeed(ctx context.Context, f *Feeder, rate float64, events int) (stop func() (FeedCounts, error)) {
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		n   FeedCounts
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := f.Feed(ctx, rate, events)
		done <- result{n, err}
	}()
	return func() (FeedCounts, error) {
		cancel()
		r := <-done
		return r.n, r.err
	}
}

// feed is a run's LMCache ingestion (-lmcache-rate): one engine's worker in a process of its
// own (FeederMain), pushing to the picker during the picker's windows only, and what it
// pushed over the run.
type feed struct {
	child   *Child
	metrics string // the picker's metrics address
	total   FeedCounts
	cpu     time.Duration // the feeder's process's CPU time at its last stop
}

// newFeed starts the feeder's process (c.Feeder makes its command from FeederMain's
// arguments), connecting from the picker's first endpoint's IP to the pull address the
// picker's child process announced.
func newFeed(ctx context.Context, c Config, picker *Child, stderr io.Writer) (*feed, error) {
	pull, metrics := picker.Attrs["lmcache"], picker.Attrs["metrics"]
	if pull == "" || metrics == "" {
		return nil, fmt.Errorf("-lmcache-rate: the picker's process did not announce its LMCache pull and metrics addresses (it said %v)", picker.Attrs)
	}
	cmd := c.Feeder(ctx, []string{"-ip", EndpointIP(0), "-pull", pull, "-instance", "extload-engine-0",
		"-seed", strconv.FormatUint(c.Seed, 10), "-rate", strconv.FormatFloat(c.FeedRate, 'g', -1, 64), "-events", strconv.Itoa(c.FeedEvents)})
	cmd.Stderr = stderr
	ch, err := StartChild(cmd, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("-lmcache-rate: the LMCache feeder's process: %w", err)
	}
	return &feed{child: ch, metrics: metrics}, nil
}

// start has the feeder's process feed until the returned stop is called; stop adds what
// was fed to the totals.
func (e *feed) start(context.Context) (stop func() error) {
	l, err := e.child.ask("start", "the start of a feed")
	if err == nil && l != "started" {
		err = fmt.Errorf("the LMCache feeder's process answered %q to start (want \"started\")", l)
	}
	if err != nil {
		return func() error { return err }
	}
	return func() error {
		l, err := e.child.ask("stop", "what it fed")
		if err != nil {
			return err
		}
		n, cpu, err := parseFed(l)
		e.cpu = max(e.cpu, cpu)
		e.total.Batches += n.Batches
		e.total.Events += n.Events
		e.total.Dropped += n.Dropped
		return err
	}
}

// report says what was pushed and what the picker counted, by its
// loadaware_lmcache_kv_operations_total.
func (e *feed) report(w io.Writer) error {
	applied, ignored, err := pickerAdmits(e.metrics)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nLMCache ingestion: %d batches (%d KV admit events) pushed to the picker during its windows, %d batches refused by the socket at once (dropped); the picker applied %d admits and ignored %d.\n",
		e.total.Batches, e.total.Events, e.total.Dropped, applied, ignored)
	if e.total.Batches > 0 {
		fmt.Fprintf(w, "The feeder's process used %.1f µs of CPU per batch pushed (its whole life, idle time between windows included), beside the generator.\n",
			float64(e.cpu)/float64(time.Microsecond)/float64(e.total.Batches))
	}
	if lost := e.total.Events - applied - ignored; lost > 0 {
		fmt.Fprintf(w, "  %d admit events pushed were not counted by the picker: see its log above, and loadaware_lmcache_* on its metrics.\n", lost)
	}
	return nil
}

func (e *feed) close() { _ = e.child.Close() }

// pickerAdmits reads the KV admits the picker applied and ignored from its metrics at addr.
func pickerAdmits(addr string) (applied, ignored int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := promtext.Get(ctx, http.DefaultClient, "http://"+addr+"/metrics")
	if err != nil {
		return 0, 0, fmt.Errorf("read the picker's metrics: %w", err)
	}
	const name = "loadaware_lmcache_kv_operations_total"
	return int(p.Sum(name, "op", "admit", "outcome", "applied")), int(p.Sum(name, "op", "admit", "outcome", "ignored")), nil
}
