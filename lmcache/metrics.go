package lmcache

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Message outcomes, the "outcome" label of loadaware_lmcache_messages_total.
const (
	outcomeApplied = "applied" // changed or confirmed the index or registry
	outcomeIgnored = "ignored" // understood but nothing to do (evict of an unknown key, ...)
	outcomeInvalid = "invalid" // could not be decoded; counted by kind in frames_invalid_total
)

// messageTypes are the values of the "type" label; anything else is counted as "other".
var messageTypes = []string{
	"RegisterMsg", "HeartbeatMsg", "DeRegisterMsg", "KVAdmitMsg", "KVEvictMsg",
	"BatchedKVOperationMsg", "FullSyncBatchMsg", "FullSyncEndMsg", "other",
}

type indexMetrics struct {
	messages  map[string][3]prometheus.Counter // type -> applied, ignored, invalid
	ops       [2][2]prometheus.Counter         // admit/evict x applied/ignored
	invalid   map[string]prometheus.Counter    // decode error kind
	keys      prometheus.GaugeFunc
	retired   prometheus.GaugeFunc
	instances *prometheus.GaugeVec
	conflicts prometheus.Gauge
	latency   prometheus.Histogram
	matched   prometheus.Histogram
	lookups   prometheus.Counter
	hits      prometheus.Counter
	lockWaits [2]prometheus.Counter // yielded, parked
}

func newIndexMetrics(reg prometheus.Registerer, keys, retired func() float64) (*indexMetrics, error) {
	msgVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loadaware_lmcache_messages_total",
		Help: "LMCache worker messages by type and outcome (applied, ignored, invalid).",
	}, []string{"type", "outcome"})
	opVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loadaware_lmcache_kv_operations_total",
		Help: "Chunk admits and evicts, from single, batched and full-sync messages, by outcome.",
	}, []string{"op", "outcome"})
	invVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loadaware_lmcache_frames_invalid_total",
		Help: "Frames that could not be decoded, by kind (malformed, unknown_type, missing_field, bad_field); each was skipped.",
	}, []string{"kind"})
	waitVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loadaware_lmcache_lookup_lock_waits_total",
		Help: "Chunk-key reads of lookups that found the key's shard locked by ingestion, by how they waited: yielded (the processor, then took the lock) or parked (on the lock, after 64 yields). Parked reads growing: ingestion holds shard locks long (a map growth, a budget eviction); lookup latency shows it.",
	}, []string{"wait"})
	m := &indexMetrics{
		messages: map[string][3]prometheus.Counter{},
		invalid:  map[string]prometheus.Counter{},
		keys: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "loadaware_lmcache_index_keys",
			Help: "Distinct chunk keys held by at least one live worker slot. A restarted worker's old keys and a superseded instance's stop counting the moment the registration that retires them is applied; until they are purged they are counted in loadaware_lmcache_retired_keys.",
		}, keys),
		retired: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "loadaware_lmcache_retired_keys",
			Help: "Chunk keys of worker slots retired by a registration (a restart, or a newer instance on the same IP) still in the index, awaiting purge: no lookup credits them and loadaware_lmcache_index_keys does not count them; key traffic and the periodic sweep (every 5 s) remove them. A key held by two retired slots counts twice.",
		}, retired),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadaware_lmcache_instances",
			Help: "Known LMCache instances by state: active (credited), no_ip (never registered), superseded (a newer instance claimed its IP), conflict (two live instances report one IP).",
		}, []string{"state"}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "loadaware_lmcache_ip_conflicts",
			Help: "IPs reported by two live LMCache instances: a configuration error; such IPs get no cache credit.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "loadaware_lmcache_lookup_duration_seconds",
			Help:    "Time to look a prompt's chunk keys up in the index (keys already computed).",
			Buckets: prometheus.ExponentialBuckets(250e-9, 2, 16),
		}),
		matched: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "loadaware_lmcache_lookup_matched_fraction",
			Help:    "Longest matched prefix over prompt length, per lookup (0 when no instance holds the first chunk).",
			Buckets: []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1},
		}),
		lookups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_lookups_total",
			Help: "Prompt lookups.",
		}),
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_lookup_first_chunk_hits_total",
			Help: "Lookups where at least one credited instance holds the prompt's first chunk.",
		}),
	}
	m.lockWaits = [2]prometheus.Counter{waitVec.WithLabelValues("yielded"), waitVec.WithLabelValues("parked")}
	for _, t := range messageTypes {
		m.messages[t] = [3]prometheus.Counter{
			msgVec.WithLabelValues(t, outcomeApplied),
			msgVec.WithLabelValues(t, outcomeIgnored),
			msgVec.WithLabelValues(t, outcomeInvalid),
		}
	}
	for i, op := range []string{"admit", "evict"} {
		for j, oc := range []string{outcomeApplied, outcomeIgnored} {
			m.ops[i][j] = opVec.WithLabelValues(op, oc)
		}
	}
	for _, k := range []string{KindMalformed, KindUnknownType, KindMissingField, KindBadField} {
		m.invalid[k] = invVec.WithLabelValues(k)
	}
	for _, s := range []InstanceState{StateActive, StateNoIP, StateSuperseded, StateConflict} {
		m.instances.WithLabelValues(string(s))
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{msgVec, opVec, invVec, m.keys, m.retired, m.instances, m.conflicts, m.latency, m.matched, m.lookups, m.hits, waitVec} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("lmcache: register index metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *indexMetrics) message(tag, outcome string) {
	c, ok := m.messages[tag]
	if !ok {
		c = m.messages["other"]
	}
	switch outcome {
	case outcomeApplied:
		c[0].Inc()
	case outcomeIgnored:
		c[1].Inc()
	default:
		c[2].Inc()
	}
}

func (m *indexMetrics) op(evict, applied bool) {
	i, j := 0, 1
	if evict {
		i = 1
	}
	if applied {
		j = 0
	}
	m.ops[i][j].Inc()
}
