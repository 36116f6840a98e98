package capture

import (
	"fmt"
	"math"

	"github.com/loadaware/loadaware-epp/bench/stats"
)

// Metric keys, shared by real and simulated data so that both are computed by
// the same code. Times are seconds, rates per second, shares and imbalance
// ratios.
const (
	TTFTMean = "ttft_mean"
	TTFTP50  = "ttft_p50"
	TTFTP90  = "ttft_p90"
	TTFTP95  = "ttft_p95"
	TTFTP99  = "ttft_p99"
	ITLP50   = "itl_p50"
	ITLP95   = "itl_p95"
	ITLP99   = "itl_p99"
	ITLStall = "itl_stall_share" // share of ITL gaps > StallMS
	E2EMean  = "e2e_mean"
	E2EP95   = "e2e_p95"
	E2EP99   = "e2e_p99"
	ReqS     = "req_s"
	TokS     = "tok_s"
	OKCount  = "ok"
	Errors   = "errors"
	// ImbalanceKey is the imbalance metric's key ("imbalance"; the name
	// Imbalance is the function). SeedMetrics does not set it; see
	// Cell.SeedMetrics.
	ImbalanceKey = "imbalance"
)

// StallMS is the ITL gap, in milliseconds, above which a gap counts as a stall.
const StallMS = 80

// SeedMetrics computes one seed's metrics from its rows, as the published
// summary-per-seed.csv did:
//
//   - TTFT and e2e mean and percentiles over the "ok" rows; percentiles as
//     stats.NearestPercentiles defines them (not interpolated);
//   - ITL percentiles over every gap of every ok row pooled, in seconds, and
//     the share of those gaps above StallMS;
//   - req_s = ok rows per second of the rows' span (see PerSecond), tok_s
//     likewise with the ok rows' completion tokens;
//   - ok and errors: the counts of ok and of other rows.
//
// With no ok row every latency and rate is NaN. Imbalance is not set here.
func SeedMetrics(rows []Request) map[string]float64 {
	var ttft, e2e, itl []float64
	var tokens, stalls float64
	errs := 0
	for _, r := range rows {
		if !r.OK {
			errs++
			continue
		}
		ttft = append(ttft, r.TTFT)
		e2e = append(e2e, r.E2E)
		tokens += float64(r.CompletionTokens)
		for _, g := range r.ITLs {
			itl = append(itl, g/1000)
			if g > StallMS {
				stalls++
			}
		}
	}
	m := map[string]float64{
		OKCount: float64(len(ttft)),
		Errors:  float64(errs),
	}
	tp := stats.NearestPercentiles(ttft, 50, 90, 95, 99)
	m[TTFTMean], m[TTFTP50], m[TTFTP90], m[TTFTP95], m[TTFTP99] = stats.Mean(ttft), tp[0], tp[1], tp[2], tp[3]
	ip := stats.NearestPercentiles(itl, 50, 95, 99)
	m[ITLP50], m[ITLP95], m[ITLP99] = ip[0], ip[1], ip[2]
	m[ITLStall] = math.NaN()
	if len(itl) > 0 {
		m[ITLStall] = stalls / float64(len(itl))
	}
	ep := stats.NearestPercentiles(e2e, 95, 99)
	m[E2EMean], m[E2EP95], m[E2EP99] = stats.Mean(e2e), ep[0], ep[1]
	m[ReqS], m[TokS] = PerSecond(float64(len(ttft)), rows), PerSecond(tokens, rows)
	return m
}

// Metric is the metric key of a seed's metrics m (SeedMetrics), NaN when m has none.
func Metric(m map[string]float64, key string) float64 {
	if v, ok := m[key]; ok {
		return v
	}
	return math.NaN()
}

// PerSecond is x per second of rows' span: from the earliest send over all
// rows to the latest completion (send+e2e) over the ok rows, the window every
// rate of a seed is taken over. It is NaN when the span is empty (no ok row).
func PerSecond(x float64, rows []Request) float64 {
	first, last := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		first = math.Min(first, r.Send)
		if r.OK {
			last = math.Max(last, r.Send+r.E2E)
		}
	}
	if !(last > first) {
		return math.NaN()
	}
	return x / (last - first)
}

// Goodput returns the rate of requests that met a TTFT objective: the ok rows
// whose TTFT is at most slo seconds, per second of the rows' span as req_s in
// SeedMetrics (see PerSecond). It is NaN when that span is empty (no ok row).
func Goodput(rows []Request, slo float64) float64 {
	met := 0
	for _, r := range rows {
		if r.OK && r.TTFT <= slo {
			met++
		}
	}
	return PerSecond(float64(met), rows)
}

// Imbalance is the ratio of the busiest to the idlest engine's mean of the
// samples with from <= t <= to: running holds one series per engine
// (vllm_num_requests_running). It is +Inf when the idlest mean is 0 (and the
// busiest is not), and NaN with fewer than two series or when an engine has no
// sample in the window.
func Imbalance(running []Series, from, to float64) float64 {
	if len(running) < 2 {
		return math.NaN()
	}
	hi, lo := math.Inf(-1), math.Inf(1)
	for _, s := range running {
		var sum float64
		n := 0
		for i, t := range s.T {
			if t >= from && t <= to {
				sum += s.V[i]
				n++
			}
		}
		if n == 0 {
			return math.NaN()
		}
		mean := sum / float64(n)
		hi, lo = math.Max(hi, mean), math.Min(lo, mean)
	}
	if lo == 0 {
		if hi == 0 {
			return math.NaN()
		}
		return math.Inf(1)
	}
	return hi / lo
}

// SeedMetrics returns, per seed in order, SeedMetrics of its rows plus
// Imbalance over [first send, last send] of that seed from the cell's
// vllm_num_requests_running engine series (an error when the cell has none).
func (c Cell) SeedMetrics() ([]map[string]float64, error) {
	running := c.Prom[RunningMetric]
	if len(running) == 0 {
		return nil, fmt.Errorf("capture: %s: no engine series of %s", c.Name, RunningMetric)
	}
	out := make([]map[string]float64, len(c.Seeds))
	for i, s := range c.Seeds {
		m := SeedMetrics(s.Requests)
		from, to := SendWindow(s.Requests)
		m[ImbalanceKey] = Imbalance(running, from, to)
		out[i] = m
	}
	return out, nil
}

// SendWindow is the first and the last send among rows: the window a seed's
// imbalance and facts are measured over.
func SendWindow(rows []Request) (from, to float64) {
	from, to = math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		from, to = math.Min(from, r.Send), math.Max(to, r.Send)
	}
	return from, to
}
