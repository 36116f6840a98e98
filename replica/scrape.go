package replica

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// maxScrapeBytes bounds one engine's /metrics page read by the scraper.
const maxScrapeBytes = 4 << 20

// Running and waiting requests, the engines' ground truth of their load.
var scrapedMetrics = [][]byte{[]byte("vllm:num_requests_running"), []byte("vllm:num_requests_waiting")}

// ParseEngineLoad sums the samples of vllm:num_requests_running and
// vllm:num_requests_waiting (every label set) in a Prometheus text page. It fails when
// neither metric is present or a sample's value is not a number.
func ParseEngineLoad(page []byte) (int, error) {
	total, found := 0.0, false
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var rest []byte
		for _, name := range scrapedMetrics {
			if r, ok := bytes.CutPrefix(line, name); ok && len(r) > 0 && (r[0] == ' ' || r[0] == '{') {
				rest = r
				break
			}
		}
		if rest == nil {
			continue
		}
		if rest[0] == '{' {
			end := bytes.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("replica: engine metrics: unterminated labels in %q", truncate(line))
			}
			rest = rest[end+1:]
		}
		fields := bytes.Fields(rest)
		if len(fields) == 0 {
			return 0, fmt.Errorf("replica: engine metrics: no value in %q", truncate(line))
		}
		v, err := strconv.ParseFloat(string(fields[0]), 64)
		if err != nil || v < 0 || v > 1e9 {
			return 0, fmt.Errorf("replica: engine metrics: value %q of %q is not a count", truncate(fields[0]), truncate(line))
		}
		total += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("replica: engine metrics: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("replica: engine metrics: neither vllm:num_requests_running nor vllm:num_requests_waiting is exported")
	}
	return int(total + 0.5), nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// scrapeAll reads every endpoint's /metrics once, concurrently, and records the counts.
func (r *Replica) scrapeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, addr := range r.cfg.Fleet.Endpoints() {
		wg.Go(func() {
			books := r.load.scrapeStarted(addr)
			n, err := r.scrapeOne(ctx, addr)
			if err != nil {
				r.met.scrapes.WithLabelValues("error").Inc()
				r.log.Debug("replica: engine scrape failed", "endpoint", addr, "err", err)
				return
			}
			r.met.scrapes.WithLabelValues("ok").Inc()
			r.load.scraped(addr, n, books)
		})
	}
	wg.Wait()
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
