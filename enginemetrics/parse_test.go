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
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		if r.Running < 0 || r.Waiting < 0 || r.Running > maxCount || r.Waiting > maxCount || !(r.KVUsage >= 0 && r.KVUsage <= 1) {
			t.Fatalf("Parse accepted out-of-range values %+v", r)
		}
	})
}
