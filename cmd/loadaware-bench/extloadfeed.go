package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/loadaware/loadaware-epp/bench/extload"
	"github.com/loadaware/loadaware-epp/bench/promtext"
)

// extloadFeed is extload's LMCache ingestion (-lmcache-rate): one engine's worker, pushing
// to the picker during the picker's windows only, and what it pushed over the run.
type extloadFeed struct {
	f       *extload.Feeder
	metrics string // the picker's metrics address
	total   extload.FeedCounts
}

// newExtloadFeed connects the feeder from the picker's first endpoint's IP to the pull
// address the picker's child process announced.
func newExtloadFeed(c extloadConfig, picker *extload.Child) (*extloadFeed, error) {
	pull, metrics := picker.Attrs["lmcache"], picker.Attrs["metrics"]
	if pull == "" || metrics == "" {
		return nil, fmt.Errorf("-lmcache-rate: the picker's process did not announce its LMCache pull and metrics addresses (it said %v)", picker.Attrs)
	}
	f, err := extload.NewFeeder(extload.EndpointIP(0), pull, "extload-engine-0", c.seed)
	if err != nil {
		return nil, err
	}
	return &extloadFeed{f: f, metrics: metrics}, nil
}

// start feeds until the returned stop is called; stop adds what was fed to the totals.
func (e *extloadFeed) start(ctx context.Context, rate float64, events int) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		n   extload.FeedCounts
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
func (e *extloadFeed) report(w io.Writer) error {
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

func (e *extloadFeed) close() { _ = e.f.Close() }

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
