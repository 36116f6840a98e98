package drive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

func requests(n int, every time.Duration) []workload.Request {
	out := make([]workload.Request, n)
	for i := range out {
		out[i] = workload.Request{Index: i, PrefixID: i % 3, SendAt: time.Duration(i) * every, Tokens: make([]uint32, 10+i), MaxTokens: 4}
	}
	return out
}

// fakeSend answers at once; every fifth request fails.
func fakeSend(calls *atomic.Int64) Send {
	return func(ctx context.Context, r workload.Request) Outcome {
		calls.Add(1)
		if r.Index%5 == 4 {
			return Outcome{E2E: time.Millisecond, Err: errors.New("503 Service Unavailable")}
		}
		return Outcome{TTFT: 2 * time.Millisecond, E2E: 5 * time.Millisecond, ITLs: []time.Duration{1500 * time.Microsecond}, PromptTokens: len(r.Tokens), CompletionTokens: r.MaxTokens}
	}
}

func running(start, end time.Time) (map[string][]capture.Series, error) {
	t0, t1 := unix(start), unix(end)
	return map[string][]capture.Series{capture.RunningMetric: {
		{Instance: "127.0.0.1:1", T: []float64{t0, t1 + 1}, V: []float64{1, 2}},
		{Instance: "127.0.0.1:2", T: []float64{t0, t1 + 1}, V: []float64{2, 2}},
	}}, nil
}

func TestRunCellWritesACaptureLoadReads(t *testing.T) {
	var calls atomic.Int64
	dir := t.TempDir()
	beta := 1.0
	c := Cell{Dir: dir, Arm: "loadaware", Beta: &beta, Rate: 500, Warmup: requests(3, 0),
		Seeds: []Seed{{Seed: 1, Requests: requests(10, 2*time.Millisecond)}, {Seed: 2, Requests: requests(10, 2*time.Millisecond)}},
		Extra: map[string]any{"target": "http://127.0.0.1:9"}, SeedGap: time.Millisecond}
	var last [3]int
	_, err := RunCell(context.Background(), c, fakeSend(&calls), Limits{}, running, func(done, total, failed int) { last = [3]int{done, total, failed} })
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 23 || last != [3]int{23, 23, 4} {
		t.Fatalf("%d sends, last progress %v; want 23 (3 warm-up + 2 x 10) with 4 failures", calls.Load(), last)
	}
	cell, err := capture.LoadCell(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(cell.Seeds) != 2 || len(cell.Seeds[0].Requests) != 10 || cell.Arm != "loadaware" || *cell.Beta != 1 {
		t.Fatalf("loaded %d seeds (%d rows in the first), arm %s", len(cell.Seeds), len(cell.Seeds[0].Requests), cell.Arm)
	}
	r := cell.Seeds[0].Requests
	if !r[0].OK || r[0].TTFT != 0.002 || r[0].ITLs[0] != 1.5 || r[0].PromptTokens != 10 || r[4].OK || !strings.Contains(r[4].Error, "503") {
		t.Fatalf("rows not as sent: %+v / %+v", r[0], r[4])
	}
	for _, sd := range cell.Seeds {
		for i := 1; i < len(sd.Requests); i++ {
			if sd.Requests[i].Send < sd.Requests[i-1].Send {
				t.Fatalf("seed %d: request %d sent before request %d: rows must be in send order", sd.Seed, i, i-1)
			}
		}
	}
	if !(cell.Start <= r[0].Send && cell.End >= cell.Seeds[1].Requests[9].Send) {
		t.Fatalf("window [%v, %v] does not cover the sends", cell.Start, cell.End)
	}
	if imb := capture.Imbalance(cell.Prom[capture.RunningMetric], cell.Start, cell.End); !(imb > 1) {
		t.Fatalf("imbalance %v over the cell's window; want the recorded series' (2 against 1)", imb)
	}
}

func TestRunCellStoppedKeepsTheSeedsDone(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	send := func(ctx context.Context, r workload.Request) Outcome {
		if r.Index == 100 { // seed 2's first request: stop the drive while it is in flight
			cancel()
			<-ctx.Done()
			return Outcome{E2E: time.Millisecond, Err: ctx.Err()}
		}
		return Outcome{TTFT: time.Millisecond, E2E: time.Millisecond, PromptTokens: 1, CompletionTokens: 1}
	}
	seed2 := requests(5, time.Millisecond)
	for i := range seed2 {
		seed2[i].Index += 100
	}
	c := Cell{Dir: dir, Arm: "kvaware", Rate: 100, Seeds: []Seed{{Seed: 1, Requests: requests(5, time.Millisecond)}, {Seed: 2, Requests: seed2}}}
	_, err := RunCell(ctx, c, send, Limits{}, running, nil)
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("got %v, want ErrStopped", err)
	}
	cell, err := capture.LoadCell(dir)
	if err != nil {
		t.Fatalf("a stopped drive left no valid capture: %v", err)
	}
	if len(cell.Seeds) != 1 || cell.Seeds[0].Seed != 1 {
		t.Fatalf("the stopped capture has seeds %v, want seed 1 alone", cell.Seeds)
	}
}

func TestRunCellSaysWhenNoEngineSeriesCame(t *testing.T) {
	var calls atomic.Int64
	c := Cell{Dir: t.TempDir(), Arm: "kvaware", Rate: 100, Seeds: []Seed{{Seed: 1, Requests: requests(2, 0)}}}
	none := func(start, end time.Time) (map[string][]capture.Series, error) { return nil, nil }
	_, err := RunCell(context.Background(), c, fakeSend(&calls), Limits{}, none, nil)
	if err == nil || !strings.Contains(err.Error(), "-engines") {
		t.Fatalf("got %v, want an error naming -engines and -prometheus", err)
	}
}

func TestScraperRecordsVLLMSeriesPerEngine(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := n.Add(1)
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} %d\n# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{model_name=\"m\"} %d\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n", k, 10*k)
	}))
	defer srv.Close()
	s, err := NewScraper([]string{srv.URL}, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 0)
	s.ScrapeOnce(context.Background(), t0)
	s.ScrapeOnce(context.Background(), t0.Add(5*time.Second))
	got := s.Series()
	run := got["vllm_num_requests_running"]
	if len(run) != 1 || len(run[0].V) != 2 || run[0].V[1] != 2 || run[0].Instance != strings.TrimPrefix(srv.URL, "http://") {
		t.Fatalf("running series %+v", run)
	}
	if len(got["vllm_prefix_cache_hits_total"]) != 1 || got["process_cpu_seconds_total"] != nil {
		t.Fatalf("series kept: %v; want the vLLM ones only", got)
	}
	if _, err := NewScraper([]string{"10.0.0.7:8000"}, nil); err == nil {
		t.Fatal("an engine without a scheme was accepted")
	}
	dead, _ := NewScraper([]string{"http://127.0.0.1:1"}, srv.Client())
	dead.ScrapeOnce(context.Background(), t0)
	if len(dead.Errors()) != 1 {
		t.Fatal("a refused scrape was not reported")
	}
}

func TestSwitchPolicy(t *testing.T) {
	cfg := map[string]any{"policy": "loadaware", "beta": 1.0}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				http.Error(w, "bad token", http.StatusUnauthorized)
				return
			}
			json.NewDecoder(r.Body).Decode(&cfg)
		}
		json.NewEncoder(w).Encode(cfg)
	}))
	defer srv.Close()
	b := 0.5
	if err := SwitchPolicy(context.Background(), srv.Client(), srv.URL, "s3cret", "kvaware", &b); err != nil {
		t.Fatal(err)
	}
	if cfg["policy"] != "kvaware" || cfg["beta"] != 0.5 {
		t.Fatalf("the picker's configuration is %v", cfg)
	}
	err := SwitchPolicy(context.Background(), srv.Client(), srv.URL, "wrong", "loadaware", nil)
	if err == nil || !strings.Contains(err.Error(), "LOADAWARE_ADMIN_TOKEN") {
		t.Fatalf("a refused token gave %v", err)
	}
}

func TestPrometheusRange(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		if q != "vllm:num_requests_running" {
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
			return
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"vllm:num_requests_running","instance":"10.0.0.7:8000","job":"vllm"},"values":[[1700000000,"1"],[1700000005,"3"]]}]}}`)
	}))
	defer srv.Close()
	got, err := PrometheusRange(context.Background(), srv.Client(), srv.URL, time.Unix(1700000000, 0), time.Unix(1700000010, 0), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ss := got[capture.RunningMetric]; len(ss) != 1 || ss[0].V[1] != 3 || len(got) != 1 {
		t.Fatalf("got %v", got)
	}
}
