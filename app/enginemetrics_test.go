package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// With replicas and a policy that reads engine metrics, each engine's page is fetched once
// for both: the replica's load view reads the engine-metrics scraper's fetches (decision
// 1191). Counted at a real HTTP engine: its fetches are the scraper's, none more, while the
// replica records scrapes of its own.
func TestReplicaReadsTheEngineMetricsFetches(t *testing.T) {
	ns := startNATS(t)
	var fetches atomic.Int64
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		fmt.Fprint(w, "vllm:num_requests_running 2\nvllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 0.1\n")
	}))
	defer engine.Close()
	addr := strings.TrimPrefix(engine.URL, "http://")
	cfg := Config{Endpoints: []string{addr}, Policy: "gie-default", EngineMetricsInterval: 10 * time.Millisecond,
		GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		Replicas: &ReplicaConfig{URL: ns.ClientURL(), ScrapeInterval: 30 * time.Millisecond}}
	began := time.Now()
	a, err := Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	counter := func(name, outcome string) float64 {
		fams, err := a.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && (outcome == "" || l.GetValue() == outcome) {
						sum += m.GetCounter().GetValue()
					}
				}
			}
		}
		return sum
	}
	deadline := time.Now().Add(10 * time.Second)
	for counter("loadaware_replica_scrapes_total", "ok") < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the replica recorded no 3 scrapes of the engine in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	ran := time.Since(began)
	got, scraper, replica := fetches.Load(), counter("loadaware_engine_metrics_scrapes_total", ""), counter("loadaware_replica_scrapes_total", "")
	// A fetch cut by Close may count as the scraper's error without reaching the engine.
	if float64(got) > scraper {
		t.Errorf("the engine served %d fetches, the engine-metrics scraper made %v and the replica recorded %v: the replica fetched pages of its own", got, scraper, replica)
	}
	// The replica is told of a round's fetches when 30 ms have passed since the last round
	// it was told of (from half a 10 ms round early): at most one per 25 ms the picker ran,
	// plus the first round; about a third of the rounds on a quiet host. (A loaded host
	// stretches the rounds past 30 ms, and then every round is the replica's: comparing the
	// two counts would fail there.)
	if most := float64(ran/(30*time.Millisecond-10*time.Millisecond/2)) + 1; replica > most {
		t.Errorf("the replica recorded %v scrapes in the %v the picker ran (the scraper made %v): at a 30 ms replica interval and 10 ms rounds it should record at most %v", replica, ran.Round(time.Millisecond), scraper, most)
	}
}
