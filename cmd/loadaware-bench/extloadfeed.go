package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/loadaware/loadaware-epp/bench/extload"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
	f, err := extload.NewFeeder(extloadEndpoint(0), pull, "extload-engine-0", c.seed)
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
	admits, err := pickerAdmits(e.metrics)
	if err != nil {
		return err
	}
	applied, ignored := int(admits["applied"]), int(admits["ignored"])
	fmt.Fprintf(w, "\nLMCache ingestion: %d batches (%d KV admit events) pushed to the picker during its windows, %d batches refused by the socket at once (dropped); the picker applied %d admits and ignored %d.\n",
		e.total.Batches, e.total.Events, e.total.Dropped, applied, ignored)
	if lost := e.total.Events - applied - ignored; lost > 0 {
		fmt.Fprintf(w, "  %d admit events pushed were not counted by the picker: see its log above, and loadaware_lmcache_* on its metrics.\n", lost)
	}
	return nil
}

func (e *extloadFeed) close() { _ = e.f.Close() }

// pickerAdmits reads the picker's admits by outcome from its metrics at addr.
func pickerAdmits(addr string) (map[string]float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("read the picker's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the picker's metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse the picker's metrics: %w", err)
	}
	n := map[string]float64{}
	for _, m := range families["loadaware_lmcache_kv_operations_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["op"] == "admit" {
			n[labels["outcome"]] += m.GetCounter().GetValue()
		}
	}
	return n, nil
}
