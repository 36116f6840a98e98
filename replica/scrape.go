package replica

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/enginemetrics"
)

// maxScrapeBytes bounds one engine's /metrics page read by the scraper.
const maxScrapeBytes = 4 << 20

// Running and waiting requests, the engines' ground truth of their load.
var scrapedMetrics = []string{"vllm:num_requests_running", "vllm:num_requests_waiting"}

// ParseEngineLoad sums the samples of vllm:num_requests_running and
// vllm:num_requests_waiting (every label set) in a Prometheus text page. It reads only those
// metrics' lines (enginemetrics.Families). It fails when a picked line is not in the text format, when neither metric
// is present, or when a sample is not a count (a number from 0 to 1e9).
func ParseEngineLoad(page []byte) (int, error) {
	fams, err := enginemetrics.Families(page, scrapedMetrics)
	if err != nil {
		return 0, fmt.Errorf("replica: engine metrics: %w", err)
	}
	total, found := 0.0, false
	for _, name := range scrapedMetrics {
		for _, m := range fams[name].GetMetric() {
			v := m.GetUntyped().GetValue()
			if !(v >= 0 && v <= 1e9) {
				return 0, fmt.Errorf("replica: engine metrics: %s value %v is not a count", name, v)
			}
			total += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("replica: engine metrics: neither vllm:num_requests_running nor vllm:num_requests_waiting is exported")
	}
	return int(total + 0.5), nil
}

// scrapeAll reads every endpoint's /metrics once, concurrently, and records the counts.
func (r *Replica) scrapeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, addr := range r.cfg.Fleet.Endpoints() {
		wg.Go(func() {
			done := r.scrapeStarted(addr)
			done(r.scrapeOne(ctx, addr))
		})
	}
	wg.Wait()
}

// FollowScrape is the replica's side of a fetch of addr's /metrics made by another scraper
// (Config.ScrapeFollowed; it fits enginemetrics.Config.Follow): called as the fetch
// starts, it returns what records the fetch's reading, its running plus waiting requests.
func (r *Replica) FollowScrape(addr string) func(enginemetrics.Reading, error) {
	done := r.scrapeStarted(addr)
	return func(rd enginemetrics.Reading, err error) { done(rd.Running+rd.Waiting, err) }
}

// scrapeStarted notes that a scrape of addr starts now and returns what records its
// outcome: the engine's running plus waiting requests, or the error that kept them.
func (r *Replica) scrapeStarted(addr string) func(count int, err error) {
	books := r.load.scrapeStarted(addr)
	return func(n int, err error) {
		if err != nil {
			r.met.scrapes.WithLabelValues("error").Inc()
			r.log.Debug("replica: engine scrape failed", "endpoint", addr, "err", err)
			return
		}
		r.met.scrapes.WithLabelValues("ok").Inc()
		r.load.scraped(addr, n, books)
	}
}

func (r *Replica) scrapeOne(ctx context.Context, addr string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, max(r.cfg.ScrapeInterval, 100*time.Millisecond))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	page, err := io.ReadAll(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return 0, err
	}
	return ParseEngineLoad(page)
}
