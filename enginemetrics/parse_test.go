package enginemetrics

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lora"
)

// page is a vLLM v0.11-style /metrics excerpt with the three gauges and neighbours whose
// names share a prefix.
const page = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 3
vllm:num_requests_running{engine="1",model_name="qwen"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 4
vllm:num_requests_waiting_by_reason{reason="capacity"} 99
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.5
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="qwen"} 1000
`

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, page string
		want       Reading
		err        string // substring of the error; "" for none
	}{
		{"summed running, largest usage, counts per rank", page, Reading{Running: 5, Waiting: 4, KVUsage: 0.5,
			Ranks: []RankCounts{{Running: 3, Waiting: 4}, {Running: 2}}}, ""},
		{"ranks summed over models, a rank with no series counts nothing", rankedPage(
			`{engine="2",model_name="a"} 1`, `{engine="2",model_name="b"} 2`, `{engine="0",model_name="a"} 0`),
			Reading{Running: 3, Waiting: 3, Ranks: []RankCounts{{}, {}, {Running: 3, Waiting: 3}}}, ""},
		{"one engine: no ranks", rankedPage(`{engine="0"} 2`), Reading{Running: 2, Waiting: 2}, ""},
		{"a series without the engine label: no ranks", rankedPage(`{engine="1"} 1`, `{model_name="a"} 1`), Reading{Running: 2, Waiting: 2}, ""},
		{"an engine label that is not a rank: no ranks", rankedPage(`{engine="1"} 1`, `{engine="x"} 1`), Reading{Running: 2, Waiting: 2}, ""},
		{"a negative engine label: no ranks", rankedPage(`{engine="1"} 1`, `{engine="-1"} 1`), Reading{Running: 2, Waiting: 2}, ""},
		{"an engine label past fleet.MaxRanks: no ranks", rankedPage(`{engine="1"} 1`, `{engine="1024"} 1`), Reading{Running: 2, Waiting: 2}, ""},
		{"older vLLM name for usage", "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.125\n",
			Reading{Running: 1, KVUsage: 0.125}, ""},
		{"newer name wins over the older", "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.1",
			Reading{Running: 1, KVUsage: 0.1}, ""},
		{"LoRA info: the series set last", "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n" +
			"vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 1.7e+09\n" +
			"vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"sql,chat\",waiting_lora_adapters=\"math\"} 1.8e+09\n",
			Reading{Running: 1, LoRAKnown: true, LoRA: lora.Info{MaxLoRA: 2, Running: []string{"chat", "sql"}, Waiting: []string{"math"}}}, ""},
		{"KV pool from cache_config_info: the smallest rank's", "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n" +
			"vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\",engine=\"0\",num_gpu_blocks=\"6187\"} 1\n" +
			"vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\",engine=\"1\",num_gpu_blocks=\"6000\"} 1\n",
			Reading{KVPoolTokens: 96000}, ""},
		{"KV pool unknown: no blocks yet", "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n" +
			"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1\n", Reading{}, ""},
		{"prefill counters summed over ranks, the bucket lines ignored", base0 +
			"vllm:request_prefill_time_seconds_bucket{engine=\"0\",le=\"0.3\"} 1\n" +
			"vllm:request_prefill_time_seconds_sum{engine=\"0\"} 2.5\nvllm:request_prefill_time_seconds_sum{engine=\"1\"} 1.5\n" +
			"vllm:request_prefill_time_seconds_count{engine=\"0\"} 3\nvllm:request_prefill_time_seconds_count{engine=\"1\"} 1\n" +
			"vllm:request_prefill_kv_computed_tokens_sum{engine=\"0\"} 6000\nvllm:request_prefill_kv_computed_tokens_sum{engine=\"1\"} 2000\n",
			Reading{Prefill: PrefillCounters{Known: true, Seconds: 4, Count: 4, Computed: 8000}}, ""},
		{"prefill counters without the computed tokens (a vLLM before the histogram): unknown", base0 +
			"vllm:request_prefill_time_seconds_sum 2.5\nvllm:request_prefill_time_seconds_count 3\n", Reading{}, ""},
		{"a negative prefill counter: unknown, not an error", base0 +
			"vllm:request_prefill_time_seconds_sum -1\nvllm:request_prefill_time_seconds_count 3\nvllm:request_prefill_kv_computed_tokens_sum 9\n", Reading{}, ""},
		{"a NaN prefill counter: unknown, not an error", base0 +
			"vllm:request_prefill_time_seconds_sum 1\nvllm:request_prefill_time_seconds_count NaN\nvllm:request_prefill_kv_computed_tokens_sum 9\n", Reading{}, ""},
		{"no running", "vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n", Reading{}, "no vllm:num_requests_running"},
		{"no waiting", "vllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n", Reading{}, "no vllm:num_requests_waiting"},
		{"no usage", "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n", Reading{}, "neither vllm:kv_cache_usage_perc"},
		{"usage as a percent", "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 40\n", Reading{}, "outside 0..1"},
		{"negative count", "vllm:num_requests_running -1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n", Reading{}, "not a request count"},
		{"NaN count", "vllm:num_requests_running NaN\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n", Reading{}, "not a request count"},
		{"garbled line", "vllm:num_requests_running{model_name=\"x 1\nvllm:num_requests_waiting 0\n", Reading{}, "engine /metrics"},
		{"empty page", "", Reading{}, "no vllm:num_requests_running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.page))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse = %+v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// base0 is a page's three required gauges, all zero.
const base0 = "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n"

// rankedPage is a page whose running and waiting series each carry the labels and value
// of every one of series (`{engine="0"} 1`).
func rankedPage(series ...string) string {
	var b strings.Builder
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting"} {
		for _, s := range series {
			b.WriteString(name + s + "\n")
		}
	}
	return b.String() + "vllm:kv_cache_usage_perc 0\n"
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(page))
	f.Add([]byte("vllm:num_requests_running 1e300\nvllm:num_requests_waiting 1e300\nvllm:kv_cache_usage_perc 1\n"))
	f.Add([]byte("vllm:num_requests_running{a=\"b\"} +Inf\n"))
	f.Add([]byte("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1099511627776\"} 1\n"))
	f.Add([]byte(rankedPage(`{engine="1"} 1.6`, `{engine="0"} 2`)))
	f.Add([]byte(base0 + "vllm:request_prefill_time_seconds_sum 1e300\nvllm:request_prefill_time_seconds_count 3\nvllm:request_prefill_kv_computed_tokens_sum 9\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		if r.Running < 0 || r.Waiting < 0 || r.Running > maxCount || r.Waiting > maxCount || !(r.KVUsage >= 0 && r.KVUsage <= 1) ||
			r.KVPoolTokens < 0 || r.KVPoolTokens > maxPoolTokens {
			t.Fatalf("Parse accepted out-of-range values %+v", r)
		}
		if p := r.Prefill; p.Known && !(p.Seconds >= 0 && p.Count >= 0 && p.Computed >= 0 && !math.IsInf(p.Seconds+p.Count+p.Computed, 0)) {
			t.Fatalf("Parse accepted prefill counters %+v", p)
		}
		if len(r.Ranks) == 1 || len(r.Ranks) > fleet.MaxRanks {
			t.Fatalf("Parse kept %d ranks, want none or 2..%d", len(r.Ranks), fleet.MaxRanks)
		}
		for _, c := range r.Ranks {
			if c.Running < 0 || c.Waiting < 0 || c.Running > r.Running+len(r.Ranks) || c.Waiting > r.Waiting+len(r.Ranks) {
				t.Fatalf("Parse kept rank counts %+v outside the totals %+v", c, r)
			}
		}
	})
}

func TestKVPool(t *testing.T) {
	for _, tc := range []struct {
		name, labels string
		want         int
	}{
		{"blocks x size", `{block_size="16",num_gpu_blocks="6187"}`, 98992},
		{"no size", `{num_gpu_blocks="6187"}`, 0},
		{"no blocks", `{block_size="16"}`, 0},
		{"zero blocks", `{block_size="16",num_gpu_blocks="0"}`, 0},
		{"negative size", `{block_size="-16",num_gpu_blocks="10"}`, 0},
		{"not a number", `{block_size="16",num_gpu_blocks="6187.5"}`, 0},
		{"past 2^40 tokens", `{block_size="1024",num_gpu_blocks="1099511627776"}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fams, err := Families([]byte("vllm:cache_config_info"+tc.labels+" 1\n"), []string{metricCacheInfo})
			if err != nil {
				t.Fatal(err)
			}
			if got := KVPool(fams[metricCacheInfo]); got != tc.want {
				t.Fatalf("KVPool(%s) = %d; want %d", tc.labels, got, tc.want)
			}
		})
	}
	if got := KVPool(nil); got != 0 {
		t.Fatalf("KVPool(nil) = %d; want 0", got)
	}
}
