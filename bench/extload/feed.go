package extload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
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

// feed is a run's LMCache ingestion (-lmcache-rate): one engine's worker, pushing to the
// picker during the picker's windows only, and what it pushed over the run.
type feed struct {
	f       *Feeder
	metrics string // the picker's metrics address
	total   FeedCounts
}

// newFeed connects a feeder from the picker's first endpoint's IP to the pull address the
// picker's child process announced.
func newFeed(seed uint64, picker *Child) (*feed, error) {
	pull, metrics := picker.Attrs["lmcache"], picker.Attrs["metrics"]
	if pull == "" || metrics == "" {
		return nil, fmt.Errorf("-lmcache-rate: the picker's process did not announce its LMCache pull and metrics addresses (it said %v)", picker.Attrs)
	}
	f, err := NewFeeder(EndpointIP(0), pull, "extload-engine-0", seed)
	if err != nil {
		return nil, err
	}
	return &feed{f: f, metrics: metrics}, nil
}

// start feeds until the returned stop is called; stop adds what was fed to the totals.
func (e *feed) start(ctx context.Context, rate float64, events int) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		n   FeedCounts
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := e.f.Feed(ctx, rate, events)
		done <- result{n, err}
	}()
	return func() error {
		cancel()
		r := <-done
		e.total.Batches += r.n.Batches
		e.total.Events += r.n.Events
		e.total.Dropped += r.n.Dropped
		return r.err
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
	if lost := e.total.Events - applied - ignored; lost > 0 {
		fmt.Fprintf(w, "  %d admit events pushed were not counted by the picker: see its log above, and loadaware_lmcache_* on its metrics.\n", lost)
	}
	return nil
}

func (e *feed) close() { _ = e.f.Close() }

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
