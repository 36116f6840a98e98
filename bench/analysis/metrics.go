// Package analysis turns a sweep's runs into the published outputs: the
// per-request CSV, per-seed metrics, paired comparisons of every arm with the
// kvaware baseline (one-sided exact Wilcoxon signed-rank, median relative
// reduction with a bootstrap interval), the calibration check against the
// published table, markdown tables and the figures.
//
// Everything but WriteReport is pure; WriteReport writes files under one
// directory and nothing else.
package analysis

import (
	"math"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// Summary is a latency distribution's mean and exact percentiles, in seconds.
type Summary struct {
	Mean, P50, P90, P95, P99 float64
}

func summarize(xs []float64) Summary {
	p := stats.Percentiles(xs, 50, 90, 95, 99)
	return Summary{Mean: stats.Mean(xs), P50: p[0], P90: p[1], P95: p[2], P99: p[3]}
}

// Objectives are the TTFT objectives of the goodput sweep, in milliseconds:
// 50 to 400 in steps of 25.
func Objectives() []float64 {
	var out []float64
	for ms := 50.0; ms <= 400; ms += 25 {
		out = append(out, ms)
	}
	return out
}

// HeadlineObjectiveMs is the first-token objective of the published headline
// ("19.0% fewer requests miss a 150 ms objective").
const HeadlineObjectiveMs = 150

// SeedMetrics are one arm's metrics on one seed.
type SeedMetrics struct {
	Arm          string
	Seed         uint64
	Requests     int
	Errors       int
	ErrorRate    float64
	TTFT         Summary // first content token, seconds
	ITL          Summary // gaps between tokens, over every gap of every request
	E2E          Summary
	ReqPerSec    float64   // completed requests / (first send to last completion)
	TokPerSec    float64   // output tokens over the same span
	Imbalance    float64   // mean running of the busiest engine / of the idlest
	RunningMeans []float64 // mean running requests per engine over the send window
	HitRate      float64   // fleet prefix-cache hit tokens / queried tokens
	EngineHits   []float64 // the same per engine
	Preemptions  int64
	Goodput      []float64 // fraction of requests with TTFT <= Objectives()[i]
	MissHeadline float64   // fraction missing the 150 ms objective (errors miss)
}

// Metric names the per-seed values that tables and comparisons use.
type Metric struct {
	Name  string
	Value func(SeedMetrics) float64
}

// Metrics are the columns of the results table, in order.
var Metrics = []Metric{
	{"TTFT p50", func(m SeedMetrics) float64 { return m.TTFT.P50 }},
	{"TTFT p95", func(m SeedMetrics) float64 { return m.TTFT.P95 }},
	{"TTFT p99", func(m SeedMetrics) float64 { return m.TTFT.P99 }},
	{"ITL p95", func(m SeedMetrics) float64 { return m.ITL.P95 }},
	{"e2e p95", func(m SeedMetrics) float64 { return m.E2E.P95 }},
	{"req/s", func(m SeedMetrics) float64 { return m.ReqPerSec }},
	{"imbalance", func(m SeedMetrics) float64 { return m.Imbalance }},
	{"hit rate", func(m SeedMetrics) float64 { return m.HitRate }},
	{"miss@150ms", func(m SeedMetrics) float64 { return m.MissHeadline }},
}

// MetricByName returns the metric called name.
func MetricByName(name string) (Metric, bool) {
	for _, m := range Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// SeedMetricsOf computes one run's metrics. Latencies cover the requests that
// completed; errors count in ErrorRate and as goodput misses.
func SeedMetricsOf(run experiment.Run) SeedMetrics {
	m := SeedMetrics{Arm: run.Arm.Name, Seed: run.Seed, Requests: len(run.Rows)}
	var ttft, itl, e2e []float64
	tokens := 0
	for _, r := range run.Rows {
		if r.Status != "ok" {
			m.Errors++
			continue
		}
		ttft = append(ttft, r.TTFT)
		e2e = append(e2e, r.E2E)
		for _, g := range r.ITLs {
			itl = append(itl, g/1000)
		}
		tokens += r.CompletionTokens
	}
	if m.Requests > 0 {
		m.ErrorRate = float64(m.Errors) / float64(m.Requests)
	}
	m.TTFT, m.ITL, m.E2E = summarize(ttft), summarize(itl), summarize(e2e)
	m.ReqPerSec, m.TokPerSec = math.NaN(), math.NaN()
	if run.Span > 0 {
		m.ReqPerSec = float64(len(ttft)) / run.Span
		m.TokPerSec = float64(tokens) / run.Span
	}
	m.RunningMeans, m.Imbalance = imbalance(run.Running)
	var q, h int64
	for _, e := range run.Engines {
		q += e.PrefixQueries
		h += e.PrefixHits
		m.EngineHits = append(m.EngineHits, ratio(e.PrefixHits, e.PrefixQueries))
		m.Preemptions += e.Preemptions
	}
	m.HitRate = ratio(h, q)
	for _, ms := range Objectives() {
		m.Goodput = append(m.Goodput, goodput(run.Rows, ms))
	}
	m.MissHeadline = 1 - goodput(run.Rows, HeadlineObjectiveMs)
	return m
}

// imbalance returns each engine's mean running count over the samples and the
// busiest mean over the idlest (+Inf when an engine never ran anything while
// another did, NaN without samples).
func imbalance(samples [][]int) ([]float64, float64) {
	if len(samples) == 0 || len(samples[0]) == 0 {
		return nil, math.NaN()
	}
	means := make([]float64, len(samples[0]))
	for _, s := range samples {
		for e, v := range s {
			means[e] += float64(v)
		}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for e := range means {
		means[e] /= float64(len(samples))
		lo, hi = math.Min(lo, means[e]), math.Max(hi, means[e])
	}
	switch {
	case hi == 0:
		return means, 1
	case lo == 0:
		return means, math.Inf(1)
	}
	return means, hi / lo
}

func goodput(rows []experiment.Row, objectiveMs float64) float64 {
	if len(rows) == 0 {
		return math.NaN()
	}
	n := 0
	for _, r := range rows {
		if r.Status == "ok" && r.TTFT*1000 <= objectiveMs {
			n++
		}
	}
	return float64(n) / float64(len(rows))
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}
