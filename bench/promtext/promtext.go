// Package promtext is the benchmark's one reader of Prometheus /metrics pages: it fetches a
// page, parses it with the pinned github.com/prometheus/common/expfmt text parser, and sums a
// metric's samples over label sets. It keeps no state and starts no goroutines.
//
// Product packages do not import it (they may not import bench): replica parses its engines'
// pages with expfmt directly.
package promtext

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// maxPageBytes bounds one page read by Get.
const maxPageBytes = 16 << 20

// Page is one parsed metrics page: the metric families by name, as the text format names
// them (a counter keeps its _total suffix).
type Page map[string]*dto.MetricFamily

// Parse reads a page in the Prometheus text format. A page the format does not allow (a
// sample that is not a number, a label set left open, a metric typed twice) is an error
// naming the line.
func Parse(r io.Reader) (Page, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("promtext: not a Prometheus text page: %w", err)
	}
	return fams, nil
}

// Get fetches url (a /metrics endpoint) with c and parses it. A status other than 200 is an
// error naming the URL and the status.
func Get(ctx context.Context, c *http.Client, url string) (Page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %s", url, resp.Status)
	}
	p, err := Parse(io.LimitReader(resp.Body, maxPageBytes))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return p, nil
}

// Sum adds the samples of the metric name whose labels carry every given value; match is
// label name, value pairs ("op", "admit", ...; an unpaired last name is ignored). Counters, gauges and untyped samples count
// their value; histograms and summaries their observation count. An absent metric sums to 0
// (see Has).
func (p Page) Sum(name string, match ...string) float64 {
	sum := 0.0
	for _, m := range p[name].GetMetric() {
		if matches(m, match) {
			sum += value(m)
		}
	}
	return sum
}

// Has reports whether the page exports the metric name.
func (p Page) Has(name string) bool { return len(p[name].GetMetric()) > 0 }

// Totals is every metric's Sum over all its label sets, by name.
func (p Page) Totals() map[string]float64 {
	out := make(map[string]float64, len(p))
	for name := range p {
		out[name] = p.Sum(name)
	}
	return out
}

func matches(m *dto.Metric, match []string) bool {
	for i := 0; i+1 < len(match); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == match[i] {
				found = l.GetValue() == match[i+1]
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Summary != nil:
		return float64(m.Summary.GetSampleCount())
	}
	return 0
}
