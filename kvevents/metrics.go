package kvevents

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type subMetrics struct {
	batches       *prometheus.CounterVec
	sequence      *prometheus.CounterVec
	replays       *prometheus.CounterVec
	snapshots     *prometheus.CounterVec
	endpointDrops *prometheus.CounterVec
	skipped       prometheus.Counter
	connectErrors prometheus.Counter
	subscriptions prometheus.Gauge
}

func newSubMetrics(reg prometheus.Registerer) (*subMetrics, error) {
	m := &subMetrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_kvevents_batches_total",
			Help: "vLLM KV event batches received, by outcome: applied, duplicate (already applied by a replay), bad_frames (not [topic, seq, payload]; skipped), bad_payload_<kind> (did not decode; the endpoint's entries were dropped).",
		}, []string{"outcome"}),
		sequence: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_kvevents_sequence_breaks_total",
			Help: "Breaks in an engine's batch stream: gap (batches lost), reset (the engine restarted), disconnect (the connection to its PUB socket was lost; its entries are dropped).",
		}, []string{"kind"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_kvevents_replays_total",
			Help: "Replays asked of the engines' replay sockets, by outcome: complete, incomplete (the buffer no longer held every batch: entries dropped), timeout, failed.",
		}, []string{"outcome"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_kvevents_snapshots_total",
			Help: "Snapshots asked of the engines to rebuild a stream (vllm#57789 bootstrap), by outcome: applied, none (the engine serves none: replayed instead), failed (replayed instead).",
		}, []string{"outcome"}),
		endpointDrops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_kvevents_endpoint_drops_total",
			Help: "Times an endpoint's entries were dropped because its stream lost information (fail closed), by reason: gap, bad_batch.",
		}, []string{"reason"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_kvevents_skipped_events_total",
			Help: "Events of a tag this picker does not know, skipped (a newer vLLM?).",
		}),
		connectErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_kvevents_connect_errors_total",
			Help: "Endpoints whose KV event sockets could not be set up (the log says why).",
		}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "loadaware_kvevents_subscriptions",
			Help: "Endpoints whose KV event stream is followed.",
		}),
	}
	for _, o := range []string{"applied", "duplicate", "bad_frames"} {
		m.batches.WithLabelValues(o)
	}
	for _, o := range []string{"gap", "reset", "disconnect"} {
		m.sequence.WithLabelValues(o)
	}
	for _, o := range []string{"complete", "incomplete", "timeout", "failed"} {
		m.replays.WithLabelValues(o)
	}
	for _, o := range []string{"gap", "bad_batch"} {
		m.endpointDrops.WithLabelValues(o)
	}
	for _, o := range []string{"applied", "none", "failed"} {
		m.snapshots.WithLabelValues(o)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.batches, m.sequence, m.replays, m.snapshots, m.endpointDrops, m.skipped, m.connectErrors, m.subscriptions} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("kvevents: register subscriber metrics: %w", err)
		}
	}
	return m, nil
}
