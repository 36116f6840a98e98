package drive

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/promtext"
	dto "github.com/prometheus/client_model/go"
)

// Scraper reads each engine's /metrics at an interval, as Prometheus would,
// and keeps every vLLM and LMCache gauge, counter and histogram (its sum and
// count) sample as a series per engine and
// label set. It is what drive records when no Prometheus server is named.
type Scraper struct {
	engines []string // base URLs
	client  *http.Client

	mu     sync.Mutex
	series map[string]*capture.Series // key: stem + "\x00" + instance + labels
	stems  map[string]string          // key -> file stem
	errs   map[string]error           // the last error per engine
}

// NewScraper scrapes the engines at their base URLs (scheme, host and port).
func NewScraper(engines []string, client *http.Client) (*Scraper, error) {
	for _, e := range engines {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("drive: engine %q: give its base URL, e.g. http://10.0.0.7:8000", e)
		}
	}
	return &Scraper{engines: engines, client: client, series: map[string]*capture.Series{},
		stems: map[string]string{}, errs: map[string]error{}}, nil
}

// Run scrapes every interval until ctx ends, once at once.
func (s *Scraper) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.ScrapeOnce(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ScrapeOnce reads every engine once and records the samples at now.
func (s *Scraper) ScrapeOnce(ctx context.Context, now time.Time) {
	var wg sync.WaitGroup
	for _, e := range s.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fams, err := s.read(ctx, e)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.errs[e] = err
			if err == nil {
				s.add(e, fams, now)
			}
		}()
	}
	wg.Wait()
}

func (s *Scraper) read(ctx context.Context, engine string) (promtext.Page, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	return promtext.Get(ctx, s.client, strings.TrimSuffix(engine, "/")+"/metrics")
}

// add records the vLLM gauges and counters of one scrape (the caller holds mu).
func (s *Scraper) add(engine string, fams promtext.Page, now time.Time) {
	instance := hostOf(engine)
	t := float64(now.UnixMilli()) / 1e3
	for name, f := range fams {
		if !strings.HasPrefix(name, "vllm:") && !strings.HasPrefix(name, "vllm_") && !strings.HasPrefix(name, "lmcache:") && !strings.HasPrefix(name, "lmcache_") {
			continue
		}
		stem := strings.ReplaceAll(name, ":", "_")
		for _, m := range f.GetMetric() {
			labels := map[string]string{"job": "vllm"}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			labels["instance"] = instance
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				s.sample(stem, labels, t, m.GetGauge().GetValue())
			case dto.MetricType_COUNTER:
				s.sample(stem, labels, t, m.GetCounter().GetValue())
			case dto.MetricType_HISTOGRAM:
				// As Prometheus stores a histogram: its _sum and _count series.
				s.sample(stem+"_sum", labels, t, m.GetHistogram().GetSampleSum())
				s.sample(stem+"_count", labels, t, float64(m.GetHistogram().GetSampleCount()))
			}
		}
	}
}

// sample appends one sample to the series of (stem, labels) (the caller holds mu).
func (s *Scraper) sample(stem string, labels map[string]string, t, v float64) {
	key := stem + "\x00" + capture.LabelKey(labels)
	ser := s.series[key]
	if ser == nil {
		ser = &capture.Series{Instance: labels["instance"], Labels: labels}
		s.series[key], s.stems[key] = ser, stem
	}
	if n := len(ser.T); n > 0 && t <= ser.T[n-1] {
		return
	}
	ser.T, ser.V = append(ser.T, t), append(ser.V, v)
}

// Series returns what was scraped, by file stem (the metric name with ':'
// as '_', as Prometheus's recording of vLLM's names reads in the published
// layout), each stem's series sorted by instance.
func (s *Scraper) Series() map[string][]capture.Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]capture.Series{}
	for key, ser := range s.series {
		c := *ser
		c.T, c.V = slices.Clone(ser.T), slices.Clone(ser.V)
		out[s.stems[key]] = append(out[s.stems[key]], c)
	}
	for _, ss := range out {
		capture.SortSeries(ss)
	}
	return out
}

// Errors returns the engines whose last scrape failed, with the error.
func (s *Scraper) Errors() map[string]error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]error{}
	for e, err := range s.errs {
		if err != nil {
			out[e] = err
		}
	}
	return out
}

func hostOf(base string) string {
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		return u.Host
	}
	return base
}
