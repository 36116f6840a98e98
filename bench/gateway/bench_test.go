package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// BenchmarkGatewayThroughPicker sends one request at a time (an ~8 KiB completion, its prompt as
// text or as token ids) through the gateway and the real picker to an instant engine, and reports
// the latency the gateway and the picker added (p50, p99) and the ext_proc round trip (request
// headers sent to the picker's answer) besides ns/op, which includes the client and the engine.
// Without a tokenizer the picker routes a text prompt on load alone; token ids run the policy.
func BenchmarkGatewayThroughPicker(b *testing.B) {
	ids := make([]string, 1400)
	for i := range ids {
		ids[i] = fmt.Sprint(10000 + i)
	}
	bodies := map[string]string{
		"text": `{"model":"m","max_tokens":1,"prompt":"` + strings.Repeat("lorem ipsum ", 680) + `"}`,
		"ids":  `{"model":"m","max_tokens":1,"prompt":[` + strings.Join(ids, ",") + `]}`,
	}
	for _, tc := range []struct {
		mode   gateway.BodyMode
		prompt string
	}{{gateway.FullDuplex, "text"}, {gateway.FullDuplex, "ids"}, {gateway.Buffered, "text"}, {gateway.Buffered, "ids"}} {
		mode, body := tc.mode, bodies[tc.prompt]
		b.Run(string(mode)+"/"+tc.prompt, func(b *testing.B) {
			var mu sync.Mutex
			var added, rt []float64
			s := newStack(b, "loadaware", mode, 2, instant, func(o *gateway.Options) {
				o.OnOutcome = func(o gateway.Outcome) {
					mu.Lock()
					added = append(added, float64(o.Added())/float64(time.Microsecond))
					rt = append(rt, float64(o.PickerTime)/float64(time.Microsecond))
					mu.Unlock()
				}
			})
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for b.Loop() {
				resp, err := client.Post(s.url+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.StopTimer()
			s.gw.Wait()
			mu.Lock()
			defer mu.Unlock()
			a, r := stats.Percentiles(added, 50, 99), stats.Percentiles(rt, 50, 99)
			b.ReportMetric(a[0], "added-p50-µs")
			b.ReportMetric(a[1], "added-p99-µs")
			b.ReportMetric(r[0], "extproc-rt-p50-µs")
			b.ReportMetric(r[1], "extproc-rt-p99-µs")
		})
	}
}
