package kvevents

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type indexMetrics struct {
	events  *prometheus.CounterVec
	blocks  *prometheus.CounterVec
	dropped *prometheus.CounterVec
}

func (m *indexMetrics) count(outcome string, n int) {
	if n > 0 {
		m.blocks.WithLabelValues(outcome).Add(float64(n))
	}
}

func newIndexMetrics(reg prometheus.Registerer, ix *Index) (*indexMetrics, error) {
	m := &indexMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_kvevents_events_total",
			Help: "vLLM KV cache events applied to the index, by kind (BlockStored, BlockRemoved, AllBlocksCleared).",
		}, []string{"kind"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_kvevents_blocks_total",
			Help: "Blocks named by vLLM KV cache events, by outcome: stored, tier_added, removed, removed_unknown, or refused_* (left out of the index: the reason says why, see docs/kvevents.md).",
		}, []string{"outcome"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_kvevents_dropped_blocks_total",
			Help: "Index entries dropped at once, by reason: cleared (AllBlocksCleared), reset (engine restarted), gap (batches lost, no replay), bad_batch, left (endpoint left the fleet), disconnect, block_size_changed.",
		}, []string{"reason"}),
	}
	for _, k := range []Kind{BlockStored, BlockRemoved, AllBlocksCleared} {
		m.events.WithLabelValues(k.String())
	}
	// The reasons the Help names, so a dashboard sees every series from the start.
	for _, r := range []string{"cleared", "reset", "gap", "bad_batch", "left", "disconnect", "block_size_changed"} {
		m.dropped.WithLabelValues(r)
	}
	for _, o := range []string{OutStored, OutTierAdded, OutRemoved, OutRemovedUnknown, OutLoRA, OutExtraKeys, OutGroup,
		OutSpecKind, OutUnknownParent, OutUnknownMedium, OutNonDense, OutUnknownBlock} {
		m.blocks.WithLabelValues(o)
	}
	if reg == nil {
		return m, nil
	}
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loadaware_kvevents_index_blocks",
		Help: "(block, endpoint rank) entries in the vLLM KV events index.",
	}, func() float64 { return float64(ix.Blocks()) })
	for _, c := range []prometheus.Collector{m.events, m.blocks, m.dropped, held} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("kvevents: register index metrics: %w", err)
		}
	}
	return m, nil
}

type subMetrics struct {
	batches       *prometheus.CounterVec
	sequence      *prometheus.CounterVec
	replays       *prometheus.CounterVec
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
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.batches, m.sequence, m.replays, m.endpointDrops, m.skipped, m.connectErrors, m.subscriptions} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("kvevents: register subscriber metrics: %w", err)
		}
	}
	return m, nil
}
