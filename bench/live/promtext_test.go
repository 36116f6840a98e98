package live

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/bench/sim"
)

func TestSumMetricsAddsEveryLabelSet(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    map[string]float64
		wantErr string
	}{
		{"labelled and bare samples", "# HELP a x\n# TYPE a gauge\na{x=\"1\"} 2\na{x=\"2\"} 3\nb 1.5\n\n", map[string]float64{"a": 5, "b": 1.5}, ""},
		{"a longer name is another metric", "a_total 4\na 1\n", map[string]float64{"a_total": 4, "a": 1}, ""},
		{"quoted braces and escapes in labels", `a{p="x}y",q="say \"}\""} 7` + "\n", map[string]float64{"a": 7}, ""},
		{"timestamp after the value", "a 3 1700000000000\n", map[string]float64{"a": 3}, ""},
		{"special values", "a +Inf\nb NaN\n", nil, ""},
		{"value missing", "a{x=\"1\"}\n", nil, "want a value"},
		{"unterminated labels", "a{x=\"1\" 3\n", nil, "unterminated"},
		{"not a number", "a x\n", nil, "not a number"},
		{"no name", "{x=\"1\"} 3\n", nil, "no metric name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sumMetrics(strings.NewReader(tc.text))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if len(got) != 2 {
					t.Errorf("got %v, want two metrics", got)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseSample checks the sample parser never panics and that what it accepts keeps its
// value when the label set is dropped.
func FuzzParseSample(f *testing.F) {
	for _, s := range []string{`a 1`, `a{b="c"} 2.5`, `a{b="}\""} 3 123`, `vllm:num_requests_running{model_name="m"} 0`, `{`, `a{`, `a{"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		name, v, err := parseSample(line)
		if err != nil {
			return
		}
		if name == "" || strings.ContainsAny(name, "{ \t") {
			t.Fatalf("name %q from %q", name, line)
		}
		rest := line[len(name):]
		if rest[0] == '{' {
			rest = rest[labelsEnd(rest)+1:]
		}
		name2, v2, err := parseSample("x " + rest)
		if err != nil || name2 != "x" || !(v2 == v || v != v && v2 != v2) {
			t.Fatalf("%q parsed as %v, without labels as %q %v %v", line, v, name2, v2, err)
		}
	})
}

// BenchmarkSumMetrics measures reading one engine's /metrics page.
func BenchmarkSumMetrics(b *testing.B) {
	e := &Engine{cfg: EngineConfig{ModelName: DefaultModelName}}
	e.metrics.Store(&sim.Metrics{Running: 12, Waiting: 3, KVUsage: 0.4, PrefixQueries: 123456, PrefixHits: 98765})
	rec := httptest.NewRecorder()
	e.metricsHandler(rec, nil)
	page := rec.Body.String()
	b.ResetTimer()
	for b.Loop() {
		if _, err := sumMetrics(strings.NewReader(page)); err != nil {
			b.Fatal(err)
		}
	}
}
