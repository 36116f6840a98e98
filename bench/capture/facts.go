package capture

import (
	"fmt"
	"math"
	"slices"

	"github.com/loadaware/loadaware-epp/bench/stats"
)

// Metric file stems Facts reads.
const (
	WaitingMetric      = "vllm_num_requests_waiting"
	KVUsageMetric      = "vllm_kv_cache_usage_perc"
	PreemptionsMetric  = "vllm_num_preemptions_total"
	HitsMetric         = "vllm_prefix_cache_hits_total"
	QueriesMetric      = "vllm_prefix_cache_queries_total"
	TTFTCountMetric    = "vllm_time_to_first_token_seconds_count"
	TTFTSumMetric      = "vllm_time_to_first_token_seconds_sum"
	PrefillCountMetric = "vllm_request_prefill_time_seconds_count"
	PrefillSumMetric   = "vllm_request_prefill_time_seconds_sum"
	CPUTierMetric      = "lmcache_local_cache_usage"
)

// Facts are a cell's engine-side facts over the whole Prometheus range. Every
// per-engine slice is indexed like Instances, which are the instances of
// vllm_num_requests_running sorted as strings (for gen2: the 10.130.* engine,
// the slower one, first; then the 10.131.* engine).
type Facts struct {
	Instances []string
	// HitRate is the sum over engines of increase(prefix_cache_hits) over the
	// sum of increase(prefix_cache_queries) (tokens).
	HitRate float64
	// WaitingShare is the share of scrape timestamps at which any engine
	// reports vllm_num_requests_waiting > 0; WaitingShareEngine the same per
	// engine, over that engine's samples.
	WaitingShare       float64
	WaitingShareEngine []float64 `json:",omitempty"`
	Preemptions        []float64 // increase of vllm_num_preemptions_total
	KVUsageMax         []float64 // max of vllm_kv_cache_usage_perc (0..1)
	CPUTierBytes       []float64 // mean of lmcache_local_cache_usage (bytes)
	// RequestShare is each engine's increase of
	// vllm_time_to_first_token_seconds_count over the engines' total.
	RequestShare []float64
	// EngineTTFTMean and PrefillMean are increase(_sum)/increase(_count) of
	// the engine-side TTFT and prefill-time histograms (seconds; NaN when the
	// count did not increase).
	EngineTTFTMean []float64
	PrefillMean    []float64
}

// Increase is a counter's increase over a series as Prometheus counts it
// without extrapolation: the sum of the positive steps, a drop being a reset
// after which the new value counts from zero.
func Increase(v []float64) float64 {
	var inc float64
	for i := 1; i < len(v); i++ {
		if d := v[i] - v[i-1]; d >= 0 {
			inc += d
		} else {
			inc += v[i]
		}
	}
	return inc
}

// Facts computes the cell's Facts. Every metric it reads must be present with
// exactly one engine series per instance of vllm_num_requests_running; the
// error names the missing metric file or instance.
func (c Cell) Facts() (Facts, error) { return c.window(math.Inf(-1), math.Inf(1)).facts() }

// SeedFacts computes Facts over each seed's send window, [first send, last
// send], from the samples inside it (counter increases between the first and
// the last of them), one per seed.
func (c Cell) SeedFacts() ([]Facts, error) {
	out := make([]Facts, len(c.Seeds))
	for i, s := range c.Seeds {
		from, to := SendWindow(s.Requests)
		f, err := c.window(from, to).facts()
		if err != nil {
			return nil, fmt.Errorf("capture: %s seed %d: %w", c.Name, s.Seed, err)
		}
		out[i] = f
	}
	return out, nil
}

// window returns c with every series cut to the samples with from <= t <= to.
func (c Cell) window(from, to float64) Cell {
	if math.IsInf(from, -1) && math.IsInf(to, 1) {
		return c
	}
	w := c
	w.Prom = make(map[string][]Series, len(c.Prom))
	for m, ss := range c.Prom {
		cut := make([]Series, len(ss))
		for i, s := range ss {
			cut[i] = Series{Instance: s.Instance, Labels: s.Labels}
			for j, t := range s.T {
				if t >= from && t <= to {
					cut[i].T, cut[i].V = append(cut[i].T, t), append(cut[i].V, s.V[j])
				}
			}
		}
		w.Prom[m] = cut
	}
	return w
}

func (c Cell) facts() (Facts, error) {
	var f Facts
	for _, s := range c.Prom[RunningMetric] {
		f.Instances = append(f.Instances, s.Instance)
	}
	if len(f.Instances) == 0 {
		return f, fmt.Errorf("capture: %s: prom/%s.json: no engine series", c.Name, RunningMetric)
	}
	per := func(metric string, fn func(Series) float64) ([]float64, error) {
		ss := c.Prom[metric]
		if len(ss) == 0 {
			return nil, fmt.Errorf("capture: %s: prom/%s.json: missing or no engine series", c.Name, metric)
		}
		if err := oneSeriesPerInstance(ss); err != nil {
			return nil, fmt.Errorf("capture: %s: prom/%s.json: %w", c.Name, metric, err)
		}
		out := make([]float64, len(f.Instances))
		for i, inst := range f.Instances {
			j := slices.IndexFunc(ss, func(s Series) bool { return s.Instance == inst })
			if j < 0 {
				return nil, fmt.Errorf("capture: %s: prom/%s.json: no series for instance %s", c.Name, metric, inst)
			}
			out[i] = fn(ss[j])
		}
		return out, nil
	}
	inc := func(s Series) float64 { return Increase(s.V) }
	var err error
	var hits, queries, ttftN, ttftSum, preN, preSum []float64
	for _, q := range []struct {
		metric string
		fn     func(Series) float64
		dst    *[]float64
	}{
		{HitsMetric, inc, &hits},
		{QueriesMetric, inc, &queries},
		{PreemptionsMetric, inc, &f.Preemptions},
		{KVUsageMetric, func(s Series) float64 { return maxOf(s.V) }, &f.KVUsageMax},
		{CPUTierMetric, func(s Series) float64 { return stats.Mean(s.V) }, &f.CPUTierBytes},
		{WaitingMetric, func(s Series) float64 { return shareAbove0(s.V) }, &f.WaitingShareEngine},
		{TTFTCountMetric, inc, &ttftN},
		{TTFTSumMetric, inc, &ttftSum},
		{PrefillCountMetric, inc, &preN},
		{PrefillSumMetric, inc, &preSum},
	} {
		if *q.dst, err = per(q.metric, q.fn); err != nil {
			return Facts{}, err
		}
	}
	f.HitRate = sum(hits) / sum(queries)
	f.WaitingShare = anyAbove0(c.Prom[WaitingMetric])
	total := sum(ttftN)
	for i := range f.Instances {
		f.RequestShare = append(f.RequestShare, ttftN[i]/total)
		f.EngineTTFTMean = append(f.EngineTTFTMean, ratio(ttftSum[i], ttftN[i]))
		f.PrefillMean = append(f.PrefillMean, ratio(preSum[i], preN[i]))
	}
	return f, nil
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

// maxOf and shareAbove0 are NaN for no values (a window without samples), as stats.Mean is.
func maxOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Max(v)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func shareAbove0(v []float64) float64 {
	n := 0
	for _, x := range v {
		if x > 0 {
			n++
		}
	}
	return ratio(float64(n), float64(len(v)))
}

// anyAbove0 is the share of distinct timestamps (over all series) at which at
// least one series is > 0.
func anyAbove0(ss []Series) float64 {
	pos := map[float64]bool{}
	for _, s := range ss {
		for i, t := range s.T {
			pos[t] = pos[t] || s.V[i] > 0
		}
	}
	n := 0
	for _, p := range pos {
		if p {
			n++
		}
	}
	return ratio(float64(n), float64(len(pos)))
}
