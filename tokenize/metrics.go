package tokenize

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the tokenizer's Prometheus collectors: latency by kind ("completion", "chat",
// "engine"), fallbacks by reason (the Reason constants) and the piece cache's lookups and hits.
type Metrics struct {
	latency   *prometheus.HistogramVec
	fallbacks *prometheus.CounterVec
}

// NewMetrics registers the collectors on reg. t may be nil (no piece-cache metrics, e.g. when
// tokenizing on the engine).
func NewMetrics(reg prometheus.Registerer, t *Tokenizer) (*Metrics, error) {
	m := &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadaware_tokenize_duration_seconds",
			Help:    "Time to obtain a request's prompt token ids, by kind (completion, chat, engine).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10),
		}, []string{"kind"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_tokenize_fallbacks_total",
			Help: "Requests not tokenized locally, by reason (engine_tokenize_failed means routed on load alone).",
		}, []string{"reason"}),
	}
	cs := []prometheus.Collector{m.latency, m.fallbacks}
	if t != nil && t.cache != nil {
		c := t.cache
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "loadaware_tokenize_piece_cache_lookups_total",
				Help: "Lookups of pre-tokenized pieces in the tokenizer's cache.",
			}, func() float64 { return float64(c.hits.Load() + c.misses.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "loadaware_tokenize_piece_cache_hits_total",
				Help: "Lookups of pre-tokenized pieces answered from the cache (hit rate = hits / lookups).",
			}, func() float64 { return float64(c.hits.Load()) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe records the time since start for kind.
func (m *Metrics) Observe(kind string, start time.Time) {
	m.latency.WithLabelValues(kind).Observe(time.Since(start).Seconds())
}

// Fallback counts one request not tokenized locally, by reason (see Reason).
func (m *Metrics) Fallback(reason string) { m.fallbacks.WithLabelValues(reason).Inc() }

// CacheStats returns the piece cache's hits and lookups so far (zeros without a cache).
func (t *Tokenizer) CacheStats() (hits, lookups uint64) {
	if t.cache == nil {
		return 0, 0
	}
	h := t.cache.hits.Load()
	return h, h + t.cache.misses.Load()
}
