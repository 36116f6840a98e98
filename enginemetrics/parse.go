// Package enginemetrics scrapes each engine's vLLM /metrics page at an interval and serves
// the last scrape to routing decisions: running and waiting requests and KV-cache usage,
// with the scrape's age. It is the picker's copy of what a GIE-style endpoint picker's data
// layer reads (GIE refreshes every 50 ms by default). Scraping happens only while the
// active policy reads engine metrics (Config.Needed).
package enginemetrics

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lora"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The metrics read, under vLLM's names. vLLM before v0.10 named the KV usage
// vllm:gpu_cache_usage_perc; either is accepted, the newer first.
const (
	metricRunning    = "vllm:num_requests_running"
	metricWaiting    = "vllm:num_requests_waiting"
	metricKVUsage    = "vllm:kv_cache_usage_perc"
	metricKVUsageOld = "vllm:gpu_cache_usage_perc"
	metricCacheInfo  = "vllm:cache_config_info"
	// The prefill histograms' sums and count (vLLM V1 observes both when a request
	// finishes): the time from first scheduling to first token, and the prompt tokens
	// computed (neither prefix-cache nor connector hits).
	metricPrefillSum      = "vllm:request_prefill_time_seconds_sum"
	metricPrefillCount    = "vllm:request_prefill_time_seconds_count"
	metricPrefillComputed = "vllm:request_prefill_kv_computed_tokens_sum"
)

var picked = []string{metricRunning, metricWaiting, metricKVUsage, metricKVUsageOld, lora.Metric, metricCacheInfo,
	metricPrefillSum, metricPrefillCount, metricPrefillComputed}

// maxCount bounds a request count read from a page: anything larger is not a count.
const maxCount = 1e9

// Reading is one page's values.
type Reading struct {
	Running int     // vllm:num_requests_running, summed over its label sets
	Waiting int     // vllm:num_requests_waiting, summed over its label sets
	KVUsage float64 // vllm:kv_cache_usage_perc (or gpu_cache_usage_perc), the largest of its label sets, 0..1
	// LoRA is vllm:lora_requests_info's series set last (lora.Latest); LoRAKnown is false
	// when the page has no parsable one (an engine without --enable-lora).
	LoRA      lora.Info
	LoRAKnown bool
	// KVPoolTokens is the engine's GPU KV pool in tokens, num_gpu_blocks x block_size of
	// vllm:cache_config_info's labels (the smallest of its label sets); 0 when the page has
	// no such gauge or its labels are not positive integers (KVPool).
	KVPoolTokens int
	// Prefill is the engine's cumulative prefill counters (PrefillCounters); Known false
	// when the page lacks one of them (a vLLM before the computed-tokens histogram).
	Prefill PrefillCounters
	// Ranks are the counts of each data-parallel rank, Ranks[r] those of the series whose
	// `engine` label is r (vLLM's DP engines label their gauges by rank), summed over their
	// other labels; nil unless every running and waiting series carries an integer
	// `engine` label in [0, fleet.MaxRanks) and some is above 0 (one engine: nothing to
	// tell apart).
	Ranks []RankCounts
}

// RankCounts is one data-parallel rank's requests.
type RankCounts struct{ Running, Waiting int }

// engineLabel is the label vLLM's PrometheusStatLogger puts the data-parallel rank in
// (labelnames ["model_name", "engine"], vllm/v1/metrics/loggers.py).
const engineLabel = "engine"

// rankOf is m's `engine` label as a rank, -1 when it has none or it is not one.
func rankOf(m *dto.Metric) int {
	for _, l := range m.GetLabel() {
		if l.GetName() == engineLabel {
			r, err := strconv.Atoi(l.GetValue())
			if err != nil || r < 0 || r >= fleet.MaxRanks {
				return -1
			}
			return r
		}
	}
	return -1
}

// Families parses, of a Prometheus text page, only the sample lines of the metrics named
// (a line whose name is one of names followed by a space or '{'), with the pinned expfmt
// parser: a whole vLLM page costs that parser thousands of allocations, the picked lines a
// handful (decision 1500). It fails when a picked line is not in the text format; a name
// with no line is simply absent from the result.
func Families(page []byte, names []string) (map[string]*dto.MetricFamily, error) {
	var lines []byte
	for line := range bytes.Lines(page) {
		for _, name := range names {
			if rest, ok := bytes.CutPrefix(line, []byte(name)); ok && len(rest) > 0 && (rest[0] == ' ' || rest[0] == '{') {
				lines = append(lines, line...)
				if lines[len(lines)-1] != '\n' {
					lines = append(lines, '\n')
				}
				break
			}
		}
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(lines))
}

// Parse reads a Prometheus text page as vLLM serves it. It reads only the metrics it needs
// (Families). Running and waiting are summed
// over label sets (one per model, or per data-parallel engine), and kept per rank
// (Reading.Ranks) when the series name ranks; the KV usage is the largest
// (the fullest engine behind the address decides whether it can take more). It fails,
// naming the metric and what to check, when a line is not in the text format, when one of
// the three is missing, or when a value is out of range (counts 0..1e9, usage 0..1).
func Parse(page []byte) (Reading, error) {
	fams, err := Families(page, picked)
	if err != nil {
		return Reading{}, fmt.Errorf("enginemetrics: engine /metrics: %w", err)
	}
	var r Reading
	ranked := true
	for _, f := range []struct {
		name string
		into *int
		rank func(*RankCounts) *int
	}{{metricRunning, &r.Running, func(c *RankCounts) *int { return &c.Running }},
		{metricWaiting, &r.Waiting, func(c *RankCounts) *int { return &c.Waiting }}} {
		ms := fams[f.name].GetMetric()
		if len(ms) == 0 {
			return Reading{}, fmt.Errorf("enginemetrics: engine /metrics has no %s: is this a vLLM engine's /metrics (its API port)?", f.name)
		}
		total := 0.0
		for _, m := range ms {
			v := m.GetUntyped().GetValue()
			if !(v >= 0 && v <= maxCount) {
				return Reading{}, fmt.Errorf("enginemetrics: engine /metrics: %s value %v is not a request count", f.name, v)
			}
			total += v
			if rk := rankOf(m); rk < 0 {
				ranked = false
			} else if ranked {
				for len(r.Ranks) <= rk {
					r.Ranks = append(r.Ranks, RankCounts{})
				}
				*f.rank(&r.Ranks[rk]) += int(v + 0.5)
			}
		}
		if total > maxCount {
			return Reading{}, fmt.Errorf("enginemetrics: engine /metrics: %s sums to %v, not a request count", f.name, total)
		}
		*f.into = int(total + 0.5)
	}
	if !ranked || len(r.Ranks) < 2 {
		r.Ranks = nil
	}
	kv := fams[metricKVUsage].GetMetric()
	if len(kv) == 0 {
		kv = fams[metricKVUsageOld].GetMetric()
	}
	if len(kv) == 0 {
		return Reading{}, fmt.Errorf("enginemetrics: engine /metrics has neither %s nor %s: upgrade the engine to a vLLM that exports KV-cache usage", metricKVUsage, metricKVUsageOld)
	}
	for _, m := range kv {
		v := m.GetUntyped().GetValue()
		if !(v >= 0 && v <= 1) {
			return Reading{}, fmt.Errorf("enginemetrics: engine /metrics: KV-cache usage %v is outside 0..1 (vLLM exports a fraction)", v)
		}
		r.KVUsage = max(r.KVUsage, v)
	}
	var series []lora.Series
	for _, m := range fams[lora.Metric].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		series = append(series, lora.Series{Labels: labels, Value: m.GetUntyped().GetValue()})
	}
	r.LoRA, r.LoRAKnown = lora.Latest(series)
	r.KVPoolTokens = KVPool(fams[metricCacheInfo])
	r.Prefill = prefillCounters(fams)
	return r, nil
}

// PrefillCounters are an engine's cumulative prefill counters, each summed over its label
// sets (one per model or data-parallel engine).
type PrefillCounters struct {
	Known    bool    // all three were on the page, each a finite non-negative number
	Seconds  float64 // vllm:request_prefill_time_seconds_sum
	Count    float64 // vllm:request_prefill_time_seconds_count: the requests
	Computed float64 // vllm:request_prefill_kv_computed_tokens_sum: their computed prompt tokens
}

// maxCounter bounds a cumulative counter read from a page: beyond 2^53 a float64 no longer
// counts by ones.
const maxCounter = 1 << 53

// prefillCounters reads the three prefill counters of fams. A counter missing or not a
// finite number in 0..2^53 leaves them unknown rather than failing the scrape: they are
// optional (older engines lack the computed-tokens histogram) and only refine the
// estimate.
func prefillCounters(fams map[string]*dto.MetricFamily) PrefillCounters {
	var c PrefillCounters
	for _, f := range []struct {
		name string
		into *float64
	}{{metricPrefillSum, &c.Seconds}, {metricPrefillCount, &c.Count}, {metricPrefillComputed, &c.Computed}} {
		ms := fams[f.name].GetMetric()
		if len(ms) == 0 {
			return PrefillCounters{}
		}
		for _, m := range ms {
			v := m.GetUntyped().GetValue()
			if !(v >= 0 && v <= maxCounter) {
				return PrefillCounters{}
			}
			*f.into += v
		}
	}
	c.Known = true
	return c
}

// maxPoolTokens bounds a KV pool read from vllm:cache_config_info: 2^40 tokens is more than
// any GPU holds, and keeps the product of two labels from overflowing.
const maxPoolTokens = 1 << 40

// KVPool is the KV pool in tokens that vllm:cache_config_info's labels describe:
// num_gpu_blocks x block_size, the smallest over its label sets (one per data-parallel
// engine; the smallest pool fills first). It is 0, meaning unknown, when f is nil or a
// label set lacks either label, or either is not a positive integer, or the pool exceeds
// 2^40 tokens: the caller then assumes its own default. vLLM has exported the gauge since
// v0.4 with both labels; an engine without it (or a proxy that drops it) is not an error.
func KVPool(f *dto.MetricFamily) int {
	pool := 0
	for _, m := range f.GetMetric() {
		blocks, size := 0, 0
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "num_gpu_blocks":
				blocks = positive(l.GetValue())
			case "block_size":
				size = positive(l.GetValue())
			}
		}
		if blocks == 0 || size == 0 || blocks > maxPoolTokens/size {
			return 0
		}
		if pool == 0 || blocks*size < pool {
			pool = blocks * size
		}
	}
	return pool
}

// positive is s as a positive integer of at most 2^40, or 0.
func positive(s string) int {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > maxPoolTokens {
		return 0
	}
	return int(n)
}
