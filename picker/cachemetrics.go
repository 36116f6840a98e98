package picker

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// SourceNamer is implemented by cache views that name where their matches come from
// ("lmcache", ...): the source label of the cache-share metrics. Views without a name
// are counted as "unnamed"; NoCache as "none".
type SourceNamer interface {
	CacheSource() string
}

// CacheSource implements SourceNamer.
func (NoCache) CacheSource() string { return "none" }

// CacheSource implements SourceNamer.
func (LMCacheView) CacheSource() string { return "lmcache" }

// cacheSource names the cache view v for the metrics.
func cacheSource(v CacheView) string {
	if n, ok := v.(SourceNamer); ok {
		return n.CacheSource()
	}
	return "unnamed"
}

// cacheShare counts, per chosen endpoint and cache source, the prompt tokens routed and
// the tokens of them the endpoint already held: matched / prompt is the cache hit share.
type cacheShare struct {
	prompt  *prometheus.CounterVec
	matched *prometheus.CounterVec
	seen    sync.Map      // endpoint -> *shareChildren: the endpoints with children, for forget
	gen     atomic.Uint64 // forgets so far: children resolved before the last one may be deleted
}

// shareChildren are one endpoint's counters for one source, resolved once: a decision
// then adds to them without hashing and validating its label values again.
type shareChildren struct {
	source          string
	gen             uint64 // cacheShare.gen when resolved
	prompt, matched prometheus.Counter
}

func newCacheShare() *cacheShare {
	return &cacheShare{
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_routed_prompt_tokens_total",
			Help: "Prompt tokens of requests routed with token ids, by chosen endpoint and cache source.",
		}, []string{"endpoint", "source"}),
		matched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_routed_matched_tokens_total",
			Help: "Of loadaware_routed_prompt_tokens_total, the tokens the chosen endpoint already held as a cached prefix (hit share = matched / prompt).",
		}, []string{"endpoint", "source"}),
	}
}

func (c *cacheShare) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.prompt, c.matched}
}

// routed records one decision's prompt and matched tokens on endpoint.
func (c *cacheShare) routed(endpoint, source string, prompt, matched int) {
	gen := c.gen.Load()
	v, _ := c.seen.Load(endpoint)
	ch, _ := v.(*shareChildren)
	if ch == nil || ch.source != source || ch.gen != gen {
		ch = &shareChildren{source: source, gen: gen,
			prompt: c.prompt.WithLabelValues(endpoint, source), matched: c.matched.WithLabelValues(endpoint, source)}
		c.seen.Store(endpoint, ch)
	}
	ch.prompt.Add(float64(prompt))
	ch.matched.Add(float64(matched))
}

// forget drops the series of endpoints not in keep (they left the fleet). Children that
// a decision resolved meanwhile may be among those deleted; the generation it then moves
// on makes the next decision resolve them again, so no endpoint's counts stay lost.
func (c *cacheShare) forget(keep []string) {
	defer c.gen.Add(1)
	want := make(map[string]bool, len(keep))
	for _, k := range keep {
		want[k] = true
	}
	c.seen.Range(func(k, _ any) bool {
		if ep := k.(string); !want[ep] {
			c.seen.Delete(ep)
			c.prompt.DeletePartialMatch(prometheus.Labels{"endpoint": ep})
			c.matched.DeletePartialMatch(prometheus.Labels{"endpoint": ep})
		}
		return true
	})
}
