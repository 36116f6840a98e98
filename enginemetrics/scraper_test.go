package enginemetrics

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lora"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// engine serves a /metrics page with the given running count, or 500 when fail is set.
type engine struct {
	running atomic.Int64
	fail    atomic.Bool
	hits    chan struct{}
}

func (e *engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e.hits != nil {
		select {
		case e.hits <- struct{}{}:
		default:
		}
	}
	if r.URL.Path != "/metrics" || e.fail.Load() {
		http.Error(w, "no", http.StatusInternalServerError)
		return
	}
	w.Write([]byte("vllm:num_requests_running " + itoa(e.running.Load()) + "\nvllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc 0.75\n" +
		"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1\n"))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func addr(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

func TestRoundAgesAndForgets(t *testing.T) {
	a, b := &engine{}, &engine{}
	a.running.Store(3)
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	defer sa.Close()
	defer sb.Close()
	now := time.Unix(1000, 0)
	list := []string{addr(sa), addr(sb)}
	reg := prometheus.NewRegistry()
	s, err := New(Config{Endpoints: func() []string { return list }, Now: func() time.Time { return now }, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Engine(addr(sa), now); got.Known {
		t.Fatalf("before any round: %+v; want not known", got)
	}
	b.fail.Store(true)
	s.Round(context.Background())
	got := s.Engine(addr(sa), now.Add(30*time.Millisecond))
	if !got.Known || got.Running != 3 || got.Waiting != 2 || got.KVUsage != 0.75 || got.KVPoolTokens != 1600 || got.Age != 30*time.Millisecond {
		t.Fatalf("engine a after a round, read 30ms later: %+v; want running 3, waiting 2, usage 0.75, pool 1600, age 30ms", got)
	}
	if got := s.Engine(addr(sb), now); got.Known {
		t.Fatalf("engine b answered 500: %+v; want not known", got)
	}
	if ok, bad := testutil.ToFloat64(s.scrapes.WithLabelValues("ok")), testutil.ToFloat64(s.scrapes.WithLabelValues("error")); ok != 1 || bad != 1 {
		t.Fatalf("scrapes ok %v error %v; want 1 and 1", ok, bad)
	}
	// a fails now: its last sample stays and ages.
	a.fail.Store(true)
	now = now.Add(time.Second)
	s.Round(context.Background())
	if got := s.Engine(addr(sa), now); !got.Known || got.Running != 3 || got.Age != time.Second {
		t.Fatalf("engine a after a failed round: %+v; want the old sample aged 1s", got)
	}
	// a leaves the list: forgotten.
	list = list[1:]
	s.Round(context.Background())
	if got := s.Engine(addr(sa), now); got.Known {
		t.Fatalf("engine a after leaving: %+v; want not known", got)
	}
}

func TestRunSkipsWhileNotNeeded(t *testing.T) {
	e := &engine{hits: make(chan struct{}, 1)}
	srv := httptest.NewServer(e)
	defer srv.Close()
	var needed atomic.Bool
	asked := make(chan struct{})
	s, err := New(Config{Interval: time.Millisecond, Endpoints: func() []string { return []string{addr(srv)} },
		Needed: func() bool {
			n := needed.Load()
			if !n {
				asked <- struct{}{}
			}
			return n
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	for range 5 { // five rounds asked and declined
		<-asked
	}
	select {
	case <-e.hits:
		t.Fatal("scraped while not needed")
	default:
	}
	needed.Store(true)
	for hit := false; !hit; { // scraped once needed (a round may have asked just before)
		select {
		case <-asked:
		case <-e.hits:
			hit = true
		}
	}
	cancel()
	<-done
}

// TestRunFollowsEveryFollowInterval: with nothing needing the metrics, rounds still run
// for the follower, an interval apart (to the nearest round), not every round; it is told
// of every fetch (none is made behind its back) with the page's reading, or the fetch's
// error. The scraper's clock is the test's: each reading moves it one round on, so the
// spacing is counted in the scraper's own readings, not timed (a loaded host starts the
// follower's goroutine late: timed, the follows drifted 18.99 ms apart against 20 ms).
func TestRunFollowsEveryFollowInterval(t *testing.T) {
	e := &engine{}
	e.running.Store(4)
	srv := httptest.NewServer(e)
	defer srv.Close()
	const interval, every = 2 * time.Millisecond, 20 * time.Millisecond
	type told struct {
		at      time.Time
		running int
		err     error
	}
	var starts, readings atomic.Int64
	clock := func() time.Time { return time.Unix(0, 0).Add(time.Duration(readings.Load()) * interval) }
	tells := make(chan told, 100)
	s, err := New(Config{Interval: interval, FollowInterval: every, Endpoints: func() []string { return []string{addr(srv)} },
		Now:    func() time.Time { readings.Add(1); return clock() },
		Needed: func() bool { return false },
		Follow: func(a string) func(Reading, error) {
			if a != addr(srv) {
				t.Errorf("followed %q, not the endpoint", a)
			}
			starts.Add(1)
			at := clock() // the round's reading: the scraper waits for this round to end before its next
			return func(r Reading, err error) { tells <- told{at, r.Running + r.Waiting, err} }
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	var prev time.Time
	for i := range 6 {
		if i == 4 {
			e.fail.Store(true)
		}
		var got told
		select {
		case got = <-tells:
		case <-time.After(10 * time.Second):
			t.Fatalf("follow %d: not told of a fetch in 10 s", i)
		}
		switch {
		case i < 4 && (got.err != nil || got.running != 6):
			t.Errorf("follow %d: running+waiting %d, error %v; want 6 and none", i, got.running, got.err)
		case i == 5 && got.err == nil:
			t.Errorf("follow %d of a failing engine: no error", i)
		}
		if gap := got.at.Sub(prev); i > 0 && (gap < every-interval/2 || gap > every+interval/2) {
			t.Errorf("follows %v apart on the scraper's clock; the follow interval is %v and rounds are %v apart", gap, every, interval)
		}
		prev = got.at
	}
	cancel()
	<-done
	close(tells)
	n := int64(6)
	for range tells {
		n++
	}
	if f := testutil.ToFloat64(s.scrapes.WithLabelValues("ok")) + testutil.ToFloat64(s.scrapes.WithLabelValues("error")); f != float64(n) || starts.Load() != n {
		t.Errorf("%v fetches, %d follows started, %d told: every fetch is the follower's while nothing else needs them", f, starts.Load(), n)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(Config{Interval: -time.Second, Endpoints: func() []string { return nil }}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("negative interval: %v", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("no endpoints func: no error")
	}
	if _, err := New(Config{FollowInterval: -time.Second, Endpoints: func() []string { return nil }}); err == nil || !strings.Contains(err.Error(), "follow interval") {
		t.Fatalf("negative follow interval: %v", err)
	}
	s, err := New(Config{Endpoints: func() []string { return nil }})
	if err != nil || s.Interval() != DefaultInterval {
		t.Fatalf("default interval: %v, %v; want %v", s, err, DefaultInterval)
	}
}

// TestStateReadsLoRAInfo: the scraper answers adapter residency from each engine's last
// page: known with vllm:lora_requests_info, unknown without it or before a scrape.
func TestStateReadsLoRAInfo(t *testing.T) {
	withLoRA := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.1\n" +
			`vllm:lora_requests_info{max_lora="1",running_lora_adapters="sql",waiting_lora_adapters=""} 1.8e+09` + "\n"))
	})
	sl, sp := httptest.NewServer(withLoRA), httptest.NewServer(&engine{})
	defer sl.Close()
	defer sp.Close()
	list := []string{addr(sl), addr(sp)}
	s, err := New(Config{Endpoints: func() []string { return list }})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.State(addr(sl), "sql"); got != lora.Unknown {
		t.Fatalf("before a scrape: %v", got)
	}
	s.Round(context.Background())
	for _, c := range []struct {
		addr, adapter string
		want          lora.State
	}{{addr(sl), "sql", lora.Active}, {addr(sl), "chat", lora.SlotsFull}, {addr(sp), "sql", lora.Unknown}} {
		if got := s.State(c.addr, c.adapter); got != c.want {
			t.Errorf("State(%s, %s) = %v, want %v", c.addr, c.adapter, got, c.want)
		}
	}
}

// RankLoads reports each rank's waiting and running from a page that names ranks, stamped
// with the scrape's time, and nothing for one that does not or before a scrape.
func TestRankLoadsReadsTheEngineLabel(t *testing.T) {
	ranked := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(rankedPage(`{engine="0"} 1`, `{engine="1"} 3`)))
	})
	sr, sp := httptest.NewServer(ranked), httptest.NewServer(&engine{})
	defer sr.Close()
	defer sp.Close()
	list := []string{addr(sr), addr(sp)}
	at := time.Unix(1_800_000_000, 5)
	s, err := New(Config{Endpoints: func() []string { return list }, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, ok := s.RankLoads(addr(sr), nil); ok {
		t.Fatalf("before a scrape: %v", got)
	}
	s.Round(context.Background())
	a := addr(sr)
	got, stamp, ok := s.RankLoads(a, []fleet.Load{{}})
	want := []fleet.Load{{}, {Addr: a, Prefill: 1, Decode: 1}, {Addr: a, Prefill: 3, Decode: 3}}
	if !ok || !slices.Equal(got, want) || stamp != at.UnixNano() {
		t.Errorf("RankLoads(ranked) = %v, %d, %v; want %v, %d, true", got, stamp, ok, want, at.UnixNano())
	}
	if got, _, ok := s.RankLoads(addr(sp), nil); ok {
		t.Errorf("RankLoads(no engine label) = %v, true; want not known", got)
	}
}

func TestScraperMeasuresPrefillSlowdown(t *testing.T) {
	// Each scrape shows 10 more requests of 2,000 computed tokens, each 1.3 times the
	// model's prefill time.
	var rounds atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := float64(10 * rounds.Add(1))
		fmt.Fprintf(w, "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\n"+
			"vllm:request_prefill_time_seconds_sum %v\nvllm:request_prefill_time_seconds_count %v\nvllm:request_prefill_kv_computed_tokens_sum %v\n",
			1.3*modelled(n, 2000), n, n*2000)
	}))
	defer srv.Close()
	now := time.Unix(1000, 0)
	list := []string{addr(srv)}
	reg := prometheus.NewRegistry()
	s, err := New(Config{Endpoints: func() []string { return list }, Now: func() time.Time { return now }, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 { return testutil.ToFloat64(s.slow.WithLabelValues(addr(srv))) }
	for range 3 {
		s.Round(context.Background())
	}
	if got := s.Engine(addr(srv), now).PrefillSlowdown; got != 0 || gauge() != 0 {
		t.Fatalf("after 20 requests: slowdown %v, gauge %v; want 0 (unknown) until %d", got, gauge(), PrefillWindow/2)
	}
	for range 20 {
		s.Round(context.Background())
	}
	if got := s.Engine(addr(srv), now).PrefillSlowdown; math.Abs(got-1.3) > 1e-9 || math.Abs(gauge()-1.3) > 1e-9 {
		t.Fatalf("after 220 requests: slowdown %v, gauge %v; want 1.3", got, gauge())
	}
	list = nil
	s.Round(context.Background())
	if n := testutil.CollectAndCount(s.slow); n != 0 {
		t.Fatalf("after the endpoint left: %d gauge series, want 0", n)
	}
}

func TestScraperCapsAnIdleEnginesStaleSlowdown(t *testing.T) {
	// Two endpoints. The first takes 10 requests a round at 13.87 times the model for 11
	// rounds, then nothing, idle; the second takes 10 a round at the model's speed, busy.
	page := func(busy bool, n, factor float64) string {
		running := 0
		if busy {
			running = 1
		}
		return fmt.Sprintf("vllm:num_requests_running %d\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\n"+
			"vllm:request_prefill_time_seconds_sum %v\nvllm:request_prefill_time_seconds_count %v\nvllm:request_prefill_kv_computed_tokens_sum %v\n",
			running, factor*modelled(n, 2000), n, n*2000)
	}
	var stuckRounds, busyRounds atomic.Int64
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := min(stuckRounds.Add(1), 11)
		fmt.Fprint(w, page(k < 11, float64(10*k), 13.87))
	}))
	defer stuck.Close()
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, page(true, float64(10*busyRounds.Add(1)), 1))
	}))
	defer busy.Close()
	now := time.Unix(1000, 0)
	list := []string{addr(stuck), addr(busy)}
	s, err := New(Config{Endpoints: func() []string { return list }, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	// The stuck endpoint's last first tokens come in round 11; the fleet then needs
	// PrefillWindow x 2 = 200 more, 20 rounds of the busy endpoint's 10 (give or take a
	// round: the two endpoints are scraped at once, their counts added in either order).
	for range 11 + 18 {
		s.Round(context.Background())
	}
	if got := s.Engine(addr(stuck), now).PrefillSlowdown; math.Abs(got-13.87) > 1e-9 {
		t.Fatalf("180-190 first tokens elsewhere: stuck endpoint's slowdown %v, want 13.87 (kept)", got)
	}
	for range 3 { // the two endpoints' scrapes of a round are counted in either order
		s.Round(context.Background())
	}
	if got := s.Engine(addr(stuck), now).PrefillSlowdown; math.Abs(got-1) > 1e-9 {
		t.Fatalf("200 first tokens elsewhere, idle: stuck endpoint's slowdown %v, want 1 (the other endpoint's)", got)
	}
	if got := s.Engine(addr(busy), now).PrefillSlowdown; math.Abs(got-1) > 1e-9 {
		t.Fatalf("busy endpoint's slowdown %v, want 1", got)
	}
}
