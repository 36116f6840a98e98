package kvindex

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
			Help: "Index entries dropped at once, by reason: cleared (AllBlocksCleared), reset (engine restarted), gap (batches lost, no replay), bad_batch, left (endpoint left the fleet), disconnect, block_size_changed, snapshot (replaced by a snapshot); budget counts blocks dropped one by one, a stream's least recently stored, when it holds more than its budget (--kv-events-max-blocks).",
		}, []string{"reason"}),
	}
	for _, k := range []Kind{BlockStored, BlockRemoved, AllBlocksCleared} {
		m.events.WithLabelValues(k.String())
	}
	// The reasons the Help names, so a dashboard sees every series from the start.
	for _, r := range []string{"cleared", "reset", "gap", "bad_batch", "left", "disconnect", "block_size_changed", "snapshot", DropBudget} {
		m.dropped.WithLabelValues(r)
	}
	for _, o := range []string{OutStored, OutTierAdded, OutRemoved, OutRemovedUnknown, OutLoRA, OutExtraKeys, OutGroup,
		OutSpecKind, OutUnknownParent, OutUnknownMedium, OutNonDense, OutUnknownBlock, OutRemote, OutUnknownLocal, OutOwners} {
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
			return nil, fmt.Errorf("kvindex: register index metrics: %w", err)
		}
	}
	return m, nil
}
