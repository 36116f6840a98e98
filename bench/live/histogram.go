package live

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Bucket bounds (seconds) of vLLM's v1 request histograms (vllm/v1/metrics/loggers.py),
// so a consumer's quantiles over the simulated engines' histograms are vLLM's.
var (
	ttftBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// histogram is a Prometheus histogram of durations, safe for one writer and many readers.
type histogram struct {
	bounds []float64      // upper bounds, seconds, ascending
	counts []atomic.Int64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Int64   // nanoseconds
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Int64, len(bounds)+1)}
}

// observe records d (a negative d counts as 0).
func (h *histogram) observe(d time.Duration) {
	d = max(d, 0)
	s := d.Seconds()
	i := 0
	for i < len(h.bounds) && s > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// write appends the histogram to b in the Prometheus text format, labelled by label
// (`model_name="..."`).
func (h *histogram) write(b *strings.Builder, name, help, label string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	cum := int64(0)
	for i := range h.counts {
		cum += h.counts[i].Load()
		le := "+Inf"
		if i < len(h.bounds) {
			le = strconv.FormatFloat(h.bounds[i], 'g', -1, 64)
		}
		fmt.Fprintf(b, "%s_bucket{%s,le=%q} %d\n", name, label, le, cum)
	}
	fmt.Fprintf(b, "%s_sum{%s} %v\n%s_count{%s} %d\n", name, label, float64(h.sum.Load())/1e9, name, label, cum)
}

// count is the observations recorded.
func (h *histogram) count() int64 {
	n := int64(0)
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}
