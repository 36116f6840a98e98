package enginemetrics

import (
	"reflect"
	"strings"
	"testing"

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
		{"summed running, largest usage", page, Reading{Running: 5, Waiting: 4, KVUsage: 0.5}, ""},
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

func FuzzParse(f *testing.F) {
	f.Add([]byte(page))
	f.Add([]byte("vllm:num_requests_running 1e300\nvllm:num_requests_waiting 1e300\nvllm:kv_cache_usage_perc 1\n"))
	f.Add([]byte("vllm:num_requests_running{a=\"b\"} +Inf\n"))
	f.Add([]byte("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1099511627776\"} 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		if r.Running < 0 || r.Waiting < 0 || r.Running > maxCount || r.Waiting > maxCount || !(r.KVUsage >= 0 && r.KVUsage <= 1) ||
			r.KVPoolTokens < 0 || r.KVPoolTokens > maxPoolTokens {
			t.Fatalf("Parse accepted out-of-range values %+v", r)
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
