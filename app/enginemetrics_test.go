package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/picker"
)

// A policy that reads engine metrics gets them from the engines' /metrics, scraped by the
// service at --refresh-metrics-interval: gie-default routes away from the engine whose
// scrape shows a queue and a full cache.
func TestEngineMetricsReachTheirPolicy(t *testing.T) {
	engine := func(waiting int, kv float64, hits chan struct{}) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "vllm:num_requests_running 1\nvllm:num_requests_waiting %d\nvllm:kv_cache_usage_perc %v\n", waiting, kv)
			select {
			case hits <- struct{}{}:
			default:
			}
		}))
	}
	busyHits := make(chan struct{}, 1)
	busy, idle := engine(5, 0.9, busyHits), engine(0, 0.1, nil)
	defer busy.Close()
	defer idle.Close()
	busyAddr, idleAddr := strings.TrimPrefix(busy.URL, "http://"), strings.TrimPrefix(idle.URL, "http://")
	a := start(t, Config{Endpoints: []string{busyAddr, idleAddr}, Policy: "gie-default", EngineMetricsInterval: time.Millisecond})
	// A second scrape of an engine starts only after the first round ended and was kept.
	<-busyHits
	<-busyHits
	if m := a.EngineMetrics.Engine(busyAddr, time.Now()); !m.Known || m.Waiting != 5 || m.KVUsage != 0.9 {
		t.Fatalf("the busy engine as scraped: %+v", m)
	}
	d, err := a.Picker.Pick(context.Background(), picker.Request{Tokens: []uint32{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Booking.Release()
	if d.Endpoints[0] != idleAddr {
		t.Fatalf("gie-default chose %s; want the idle engine %s (the busy one has 5 waiting, KV 0.9)", d.Endpoints[0], idleAddr)
	}
}
