package promtext

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const page = `# HELP loadaware_lmcache_kv_operations_total KV operations.
# TYPE loadaware_lmcache_kv_operations_total counter
loadaware_lmcache_kv_operations_total{op="admit",outcome="applied"} 7
loadaware_lmcache_kv_operations_total{op="admit",outcome="ignored"} 2
loadaware_lmcache_kv_operations_total{op="evict",outcome="applied"} 5
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
vllm:num_requests_running_total 9
# TYPE lat histogram
lat_bucket{le="1"} 1
lat_bucket{le="+Inf"} 4
lat_sum 2.5
lat_count 4
bare 1.5 1700000000000
`

func TestSum(t *testing.T) {
	p, err := Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		metric string
		match  []string
		want   float64
	}{
		{"every label set", "loadaware_lmcache_kv_operations_total", nil, 14},
		{"one label", "loadaware_lmcache_kv_operations_total", []string{"op", "admit"}, 9},
		{"two labels", "loadaware_lmcache_kv_operations_total", []string{"op", "admit", "outcome", "ignored"}, 2},
		{"a label no sample carries", "loadaware_lmcache_kv_operations_total", []string{"engine", "a"}, 0},
		{"a longer name is another metric", "vllm:num_requests_running", nil, 3},
		{"histogram counts observations", "lat", nil, 4},
		{"untyped with a timestamp", "bare", nil, 1.5},
		{"absent", "nope", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Sum(tc.metric, tc.match...); got != tc.want {
				t.Errorf("Sum(%q, %q) = %v, want %v", tc.metric, tc.match, got, tc.want)
			}
		})
	}
	if !p.Has("bare") || p.Has("nope") {
		t.Errorf("Has: bare %v, nope %v; want true, false", p.Has("bare"), p.Has("nope"))
	}
	want := map[string]float64{"loadaware_lmcache_kv_operations_total": 14, "vllm:num_requests_running": 3,
		"vllm:num_requests_running_total": 9, "lat": 4, "bare": 1.5}
	if diff := cmp.Diff(want, p.Totals()); diff != "" {
		t.Errorf("Totals (-want +got):\n%s", diff)
	}
}

func TestParseRejectsWhatTheFormatDoesNotAllow(t *testing.T) {
	tests := []struct{ name, text string }{
		{"value not a number", "a x\n"},
		{"value missing", "a{x=\"1\"}\n"},
		{"label set left open", "a{x=\"1\" 3\n"},
		{"no metric name", "{x=\"1\"} 3\n"},
		{"typed twice", "# TYPE a gauge\n# TYPE a counter\na 1\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if p, err := Parse(strings.NewReader(tc.text)); err == nil || !strings.Contains(err.Error(), "not a Prometheus text page") {
				t.Errorf("Parse(%q) = %v, %v; want an error", tc.text, p, err)
			}
		})
	}
}

func TestGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			_, _ = w.Write([]byte(page))
		case "/garbage":
			_, _ = w.Write([]byte("a{\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	p, err := Get(context.Background(), srv.Client(), srv.URL+"/metrics")
	if err != nil || p.Sum("vllm:num_requests_running") != 3 {
		t.Errorf("Get /metrics = %v, %v; want running 3", p, err)
	}
	for path, want := range map[string]string{"/missing": "status 404", "/garbage": "not a Prometheus text page"} {
		if _, err := Get(context.Background(), srv.Client(), srv.URL+path); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("Get %s: error %v, want one naming the URL and saying %q", path, err, want)
		}
	}
}

// FuzzParse checks that no page makes Parse panic and that every page it accepts sums to the
// same totals whichever way it is asked.
func FuzzParse(f *testing.F) {
	for _, s := range []string{page, "a 1\n", `a{b="}\""} 3 123` + "\n", "# TYPE a gauge\na NaN\n", "a{\n", "{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse(strings.NewReader(text))
		if err != nil {
			return
		}
		for name, v := range p.Totals() {
			if got := p.Sum(name); got != v && !(math.IsNaN(got) && math.IsNaN(v)) {
				t.Fatalf("%s: Sum %v, Totals %v", name, got, v)
			}
		}
	})
}
