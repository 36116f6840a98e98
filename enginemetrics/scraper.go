package enginemetrics

import (
	"context"
	"errors"
	"fmt"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lora"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/scoring"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultInterval is GIE's default metrics refresh interval (its --refresh-metrics-interval,
// 50 ms): a peer policy fed at this interval sees engines as GIE's own data layer does.
const DefaultInterval = 50 * time.Millisecond

// Bounds of one scrape round.
const (
	maxPageBytes  = 4 << 20 // one engine's /metrics page
	maxConcurrent = 16      // scrapes in flight at once
	minTimeout    = 100 * time.Millisecond
	maxTimeout    = 2 * time.Second
)

// Config configures a Scraper.
type Config struct {
	// Interval between scrape rounds; 0 means DefaultInterval. A round that outlasts it
	// delays the next (rounds never overlap).
	Interval time.Duration
	// Endpoints lists the addresses (host:port) to scrape; called once per round.
	Endpoints func() []string
	// Needed reports whether anything reads the metrics now (the active policy does); a
	// round is skipped when it says false. nil means always.
	Needed     func() bool
	Client     *http.Client // nil: a client of its own
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are not registered
	// Follow, when set, is a second reader of the same pages (package replica's load view),
	// so that each engine's page is fetched once for both. Every FollowInterval, a round
	// runs whether or not Needed says so, and Follow is called as each of its fetches
	// starts; the function it returns (nil: none) gets that fetch's Reading or error.
	Follow func(addr string) func(Reading, error)
	// FollowInterval is how often Follow's rounds come, rounded to the nearest Interval;
	// 0 means every round.
	FollowInterval time.Duration
}

type sample struct {
	r     Reading
	at    time.Time
	speed PrefillSpeed // over every scrape of the endpoint so far
}

// Scraper keeps the last successful scrape of every endpoint. Engine is safe for concurrent
// use with Run.
type Scraper struct {
	cfg     Config
	mu      sync.RWMutex
	last    map[string]sample
	firsts  float64                // every endpoint's first tokens the scrapes counted (PrefillSpeed.Age)
	scrapes *prometheus.CounterVec // by outcome
	slow    *prometheus.GaugeVec   // each endpoint's prefill slowdown, by endpoint
}

// New checks cfg and returns a Scraper; Run starts it.
func New(cfg Config) (*Scraper, error) {
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("enginemetrics: interval %v is negative: use a positive duration such as %v", cfg.Interval, DefaultInterval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.FollowInterval < 0 {
		return nil, fmt.Errorf("enginemetrics: follow interval %v is negative: use 0 (every round) or a positive duration", cfg.FollowInterval)
	}
	if cfg.Endpoints == nil {
		return nil, errors.New("enginemetrics: Config.Endpoints is nil")
	}
	if cfg.Needed == nil {
		cfg.Needed = func() bool { return true }
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Scraper{cfg: cfg, last: make(map[string]sample),
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loadaware_engine_metrics_scrapes_total",
			Help: "Scrapes of the engines' /metrics for the policies that read vLLM's running, waiting and KV-usage gauges, by outcome (ok, error)."}, []string{"outcome"})}
	s.slow = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "loadaware_engine_prefill_slowdown_ratio",
		Help: "Each engine's measured prefill time over the calibrated model's for the tokens it computed (1.3: 30% slower than the A10 model), smoothed over its last 100 requests; 0 until 50 are measured. An idle engine that took no request while its fleet took 100 a engine reads no more than its peers' highest (decision 1701)."}, []string{"endpoint"})
	s.scrapes.WithLabelValues("ok")
	s.scrapes.WithLabelValues("error")
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.scrapes, s.slow} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Interval is the time between scrape rounds.
func (s *Scraper) Interval() time.Duration { return s.cfg.Interval }

// Run scrapes every Interval until ctx ends, skipping rounds while Needed says false unless
// Follow is due (see Config.Follow).
func (s *Scraper) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	var followed time.Time
	for {
		now := s.cfg.Now()
		// Due from half an Interval early: a tick a little before the mark is the mark's.
		follow := s.cfg.Follow != nil && !now.Before(followed.Add(s.cfg.FollowInterval-s.cfg.Interval/2))
		if follow {
			followed = now
		}
		if follow || s.cfg.Needed() {
			s.round(ctx, follow)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round scrapes every endpoint once (at most 16 at a time), keeps each success, and forgets
// the endpoints no longer listed. A failed scrape keeps the endpoint's previous sample, which
// ages. Follow is not told of its fetches.
func (s *Scraper) Round(ctx context.Context) { s.round(ctx, false) }

// round is Round, telling Follow of each fetch when follow is set.
func (s *Scraper) round(ctx context.Context, follow bool) {
	addrs := s.cfg.Endpoints()
	timeout := min(max(2*s.cfg.Interval, minTimeout), maxTimeout)
	slots := make(chan struct{}, maxConcurrent)
	var wg sync.WaitGroup
	var scraped []string // the endpoints scraped this round, under s.mu
	for _, addr := range addrs {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			var told func(Reading, error)
			if follow {
				told = s.cfg.Follow(addr)
			}
			r, err := s.scrapeOne(ctx, addr, timeout)
			if told != nil {
				told(r, err)
			}
			if err != nil {
				s.scrapes.WithLabelValues("error").Inc()
				s.cfg.Logger.Debug("enginemetrics: scrape failed", "endpoint", addr, "err", err)
				return
			}
			s.scrapes.WithLabelValues("ok").Inc()
			at := s.cfg.Now()
			s.mu.Lock()
			v := s.last[addr]
			s.firsts += v.speed.Observe(r.Prefill)
			s.last[addr] = sample{r: r, at: at, speed: v.speed}
			scraped = append(scraped, addr)
			s.mu.Unlock()
		})
	}
	wg.Wait()
	keep := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		keep[a] = true
	}
	s.mu.Lock()
	for a := range s.last {
		if !keep[a] {
			delete(s.last, a)
			s.slow.DeleteLabelValues(a)
		}
	}
	s.age(scraped, len(addrs))
	s.mu.Unlock()
}

// age ages the prefill speed of each endpoint scraped this round (PrefillSpeed.Age),
// once every reading of the round is in, against the highest reading of the other
// endpoints (Peers, one pass). s.mu must be held.
func (s *Scraper) age(scraped []string, engines int) {
	var peers Peers[string]
	for a, o := range s.last {
		peers.Add(a, o.speed.Slowdown())
	}
	for _, addr := range scraped {
		v, ok := s.last[addr]
		if !ok {
			continue
		}
		v.speed.Age(s.firsts, engines, v.r.Running == 0 && v.r.Waiting == 0, peers.Of(addr))
		s.last[addr] = v
		s.slow.WithLabelValues(addr).Set(v.speed.Slowdown())
	}
}

func (s *Scraper) scrapeOne(ctx context.Context, addr string, timeout time.Duration) (Reading, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return Reading{}, err
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return Reading{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Reading{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	page, err := io.ReadAll(io.LimitReader(resp.Body, maxPageBytes))
	if err != nil {
		return Reading{}, err
	}
	return Parse(page)
}

// State implements picker.AdapterView: what addr's adapter slots, at its last successful
// scrape, mean for a request for adapter (lora.Unknown without one, or without the gauge).
func (s *Scraper) State(addr, adapter string) lora.State {
	s.mu.RLock()
	v, ok := s.last[addr]
	s.mu.RUnlock()
	if !ok || !v.r.LoRAKnown {
		return lora.Unknown
	}
	return v.r.LoRA.State(adapter)
}

// Engine returns addr's last successful scrape, aged at now; the zero value (not Known)
// when it has none.
func (s *Scraper) Engine(addr string, now time.Time) scoring.EngineMetrics {
	s.mu.RLock()
	v, ok := s.last[addr]
	s.mu.RUnlock()
	if !ok {
		return scoring.EngineMetrics{}
	}
	return scoring.EngineMetrics{Known: true, Running: v.r.Running, Waiting: v.r.Waiting, KVUsage: v.r.KVUsage,
		KVPoolTokens: v.r.KVPoolTokens, PrefillSlowdown: v.speed.Slowdown(), Age: max(now.Sub(v.at), 0)}
}

// RankLoads implements picker.RankEngineView: each data-parallel rank's requests at
// addr's last successful scrape, waiting as Prefill and running as Decode, rank r at
// dst[len(dst)+r], with the scrape's time in Unix nanoseconds as its stamp; ok false when
// that scrape named no ranks (Reading.Ranks). It allocates nothing when dst has room.
func (s *Scraper) RankLoads(addr string, dst []fleet.Load) ([]fleet.Load, int64, bool) {
	s.mu.RLock()
	v, ok := s.last[addr]
	s.mu.RUnlock()
	if !ok || len(v.r.Ranks) == 0 {
		return dst, 0, false
	}
	for _, c := range v.r.Ranks {
		dst = append(dst, fleet.Load{Addr: addr, Prefill: c.Waiting, Decode: c.Running})
	}
	return dst, v.at.UnixNano(), true
}
