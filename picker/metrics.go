package picker

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	decisions   *prometheus.CounterVec
	decided     atomic.Pointer[map[decisionKey]prometheus.Counter] // decisions' children, resolved once
	decidedMu   sync.Mutex                                         // held to add to decided
	latency     prometheus.Histogram
	pickErrors  *prometheus.CounterVec
	untokenized *prometheus.CounterVec
	largeCPU    prometheus.Counter // CPU seconds charged to the large tokenizations' budget
	cacheErrors prometheus.Counter
	share       *cacheShare
	unhealthy   prometheus.Counter
	rankings    *prometheus.CounterVec
	rankLeaders prometheus.Counter // rankings' children, resolved once
	rankWhole   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_decisions_total",
			Help: "Routing decisions by policy and by the reason the winner won.",
		}, []string{"policy", "reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "loadaware_decision_duration_seconds",
			Help:    "Time to make one routing decision: tokenizing, cache lookup, ranking and booking.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 16), // 5 us .. 160 ms
		}),
		pickErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_pick_errors_total",
			Help: "Requests the picker could not route, by kind (no-endpoints, subset-empty, subset-unmatched).",
		}, []string{"kind"}),
		untokenized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_untokenized_requests_total",
			Help: "Requests routed on load alone because their prompt had no token ids, by reason.",
		}, []string{"reason"}),
		largeCPU: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_large_tokenize_cpu_seconds_total",
			Help: "CPU seconds the tokenizations of prompts of 32 KiB or more took of their threads, charged to --large-tokenize-cpu's budget (counted only while the budget is on).",
		}),
		cacheErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_cache_lookup_errors_total",
			Help: "Cache lookups that failed; those requests got no cache credit.",
		}),
		share: newCacheShare(),
		unhealthy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_all_unhealthy_decisions_total",
			Help: "Decisions made while every candidate endpoint was unhealthy (routed among all of them rather than refused).",
		}),
		rankings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_rankings_total",
			Help: "Rankings by what they read: leaders (loadaware over the whole fleet: the holders and the least loaded others only) or whole (every candidate).",
		}, []string{"read"}),
	}
	m.rankLeaders, m.rankWhole = m.rankings.WithLabelValues("leaders"), m.rankings.WithLabelValues("whole")
	m.decided.Store(&map[decisionKey]prometheus.Counter{})
	if reg != nil {
		for _, c := range append([]prometheus.Collector{m.decisions, m.latency, m.pickErrors, m.untokenized, m.largeCPU, m.cacheErrors, m.unhealthy, m.rankings}, m.share.collectors()...) {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// decisionKey is a loadaware_decisions_total series: policies and reasons are a few names.
type decisionKey struct{ policy, reason string }

// decision counts one decision of policy whose winner won for reason. A series' child is
// resolved once and then read from an immutable map, so a decision neither hashes nor
// validates the label values nor takes a lock.
func (m *metrics) decision(policy, reason string) {
	k := decisionKey{policy, reason}
	c, ok := (*m.decided.Load())[k]
	if !ok {
		m.decidedMu.Lock()
		old := *m.decided.Load()
		if c, ok = old[k]; !ok {
			c = m.decisions.WithLabelValues(policy, reason)
			next := maps.Clone(old)
			next[k] = c
			m.decided.Store(&next)
		}
		m.decidedMu.Unlock()
	}
	c.Inc()
}
