package drive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
)

// SwitchPolicy sets the running picker's policy and beta through its
// /admin/config (admin is the picker's metrics/admin base URL, token its admin
// token) and reads the configuration back to confirm it.
func SwitchPolicy(ctx context.Context, client *http.Client, admin, token, policy string, beta *float64) error {
	body := map[string]any{"policy": policy}
	if beta != nil {
		body["beta"] = *beta
	}
	b, _ := json.Marshal(body)
	u := strings.TrimSuffix(admin, "/") + "/admin/config"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("drive: admin URL %q: %w", admin, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("drive: switch the picker to %s: %w", policy, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("drive: the picker refused the switch to %s (%s: %s): set LOADAWARE_ADMIN_TOKEN to its --admin-token", policy, resp.Status, strings.TrimSpace(string(msg)))
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("drive: switch the picker to %s: %s: %s", policy, resp.Status, strings.TrimSpace(string(msg)))
	}
	var got struct {
		Policy string  `json:"policy"`
		Beta   float64 `json:"beta"`
	}
	greq, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	gresp, err := client.Do(greq)
	if err != nil {
		return fmt.Errorf("drive: read the picker's configuration back: %w", err)
	}
	defer gresp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(gresp.Body, 1<<16)).Decode(&got); err != nil {
		return fmt.Errorf("drive: read the picker's configuration back: %w", err)
	}
	if !strings.EqualFold(got.Policy, policy) || (beta != nil && got.Beta != *beta) {
		return fmt.Errorf("drive: asked the picker for %s, it reports %s (beta %g)", policy, got.Policy, got.Beta)
	}
	return nil
}

// ResetCaches POSTs to each URL (e.g. vLLM's /reset_prefix_cache, served when
// the engine runs with VLLM_SERVER_DEV_MODE=1) and says which refused.
func ResetCaches(ctx context.Context, client *http.Client, urls []string) error {
	var failed []string
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
		if err != nil {
			return fmt.Errorf("drive: reset URL %q: %w", u, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", u, err))
			continue
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			failed = append(failed, fmt.Sprintf("%s (%s)", u, resp.Status))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("drive: cache reset refused by %s: the next cell does not start cold (vLLM serves /reset_prefix_cache with VLLM_SERVER_DEV_MODE=1)", strings.Join(failed, ", "))
	}
	return nil
}

// RangeMetrics are the engine metrics drive asks a Prometheus server for:
// vLLM's names, with their file stems.
var RangeMetrics = []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
	"vllm:gpu_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
	"vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count",
	"vllm:request_prefill_time_seconds_sum", "vllm:request_prefill_time_seconds_count", "lmcache:local_cache_usage"}

// PrometheusRange asks the Prometheus server at base for each of RangeMetrics
// over [start, end] at step and returns the engine series by file stem. A
// metric the server has no series of is left out; vllm:num_requests_running
// must have some.
func PrometheusRange(ctx context.Context, client *http.Client, base string, start, end time.Time, step time.Duration) (map[string][]capture.Series, error) {
	out := map[string][]capture.Series{}
	for _, m := range RangeMetrics {
		q := url.Values{"query": {m}, "start": {strconv.FormatFloat(unix(start), 'f', 3, 64)},
			"end": {strconv.FormatFloat(unix(end), 'f', 3, 64)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/api/v1/query_range?"+q.Encode(), nil)
		if err != nil {
			return nil, fmt.Errorf("drive: Prometheus URL %q: %w", base, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("drive: Prometheus query_range %s: %w", m, err)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("drive: Prometheus query_range %s: %s", m, resp.Status)
		}
		ss, err := capture.ParseQueryRange(data, m)
		if err != nil {
			if m != "vllm:num_requests_running" {
				continue // a metric this vLLM version does not export
			}
			return nil, err
		}
		out[strings.ReplaceAll(m, ":", "_")] = ss
	}
	return out, nil
}
