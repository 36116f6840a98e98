package extproc

import (
	"slices"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// BenchmarkRoundTrip measures one whole ext_proc conversation over loopback plaintext gRPC:
// request headers + an 8 KiB completion body (one frame) -> routing answer + body echo,
// then response headers and one end_of_stream response chunk. It reports the p50 and p99
// of the request-side round trip (headers sent -> routed body received).
func BenchmarkRoundTrip(b *testing.B) {
	benchRoundTrip(b, harnessOpts{endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}})
}

// benchRoundTrip is BenchmarkRoundTrip's loop on a harness made with o.
func benchRoundTrip(b *testing.B, o harnessOpts) {
	h := newHarness(b, o)
	prompt := strings.Repeat("lorem ipsum ", 8192/12)
	body8k := `{"model":"m","prompt":"` + prompt[:8192-len(`{"model":"m","prompt":""}`)] + `"}`
	reqs := []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(body8k, true)}
	resp := []*extprocv3.ProcessingRequest{respHeaders(false), respBody("data: [DONE]\n\n", true)}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, err := h.client.Process(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, r := range reqs {
			if err := st.Send(r); err != nil {
				b.Fatal(err)
			}
		}
		for j := 0; j < 2; j++ {
			if _, err := st.Recv(); err != nil {
				b.Fatal(err)
			}
		}
		lat = append(lat, time.Since(start))
		for _, r := range resp {
			if err := st.Send(r); err != nil {
				b.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				b.Fatal(err)
			}
		}
		_ = st.CloseSend()
		<-h.done
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}
