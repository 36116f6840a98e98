package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// HealthConfig configures endpoint health. Passive health (what Envoy saw of each routed
// request) is always on; active checks are on when CheckInterval > 0.
type HealthConfig struct {
	// CheckPath is requested on every endpoint (GET http://ip:port/path); default "/health"
	// (vLLM's). A 2xx answer passes.
	CheckPath string
	// CheckInterval is the period of active checks; 0 disables them (Kubernetes discovery
	// follows readiness instead). cmd/loadaware-epp enables them in static mode.
	CheckInterval time.Duration
	// CheckTimeout bounds one check; 0 means 1 s (a slow answer is not a dead engine: a
	// killed one refuses the connection at once).
	CheckTimeout time.Duration
	Policy       fleet.HealthPolicy
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// healthWatch feeds a fleet.Health from the ext_proc responses and the active checks,
// and logs and counts every transition.
type healthWatch struct {
	cfg    HealthConfig
	h      *fleet.Health
	log    *slog.Logger
	client *http.Client

	checks      *prometheus.CounterVec
	transitions *prometheus.CounterVec
	unhealthy   *prometheus.GaugeVec
	mu          sync.Mutex // guards the unhealthy gauge's label set
}

func newHealthWatch(cfg HealthConfig, log *slog.Logger, reg prometheus.Registerer) (*healthWatch, error) {
	if cfg.CheckPath == "" {
		cfg.CheckPath = "/health"
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	w := &healthWatch{cfg: cfg, h: fleet.NewHealth(cfg.Policy), log: log,
		client: &http.Client{Timeout: cfg.CheckTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: 30 * time.Second}},
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_health_checks_total",
			Help: "Active endpoint health checks (GET /health), by outcome (ok, failed).",
		}, []string{"outcome"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_endpoint_health_transitions_total",
			Help: "Endpoints leaving (to=unhealthy) or rejoining (to=healthy) the candidates, by source (active checks, passive: responses Envoy saw).",
		}, []string{"to", "source"}),
		unhealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadaware_endpoint_unhealthy",
			Help: "1 for an endpoint left out of the candidates as unhealthy.",
		}, []string{"endpoint"}),
	}
	for _, c := range []prometheus.Collector{w.checks, w.transitions, w.unhealthy} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// observe is extproc's OnResponse: 502, 503 and 504 (Envoy's answers for connect
// failures, resets and timeouts) count against the endpoint; other statuses for it,
// unless the request was routed before the endpoint's latest failure (fleet.Passive).
func (w *healthWatch) observe(endpoint string, status int, decided time.Time) {
	ok := status != http.StatusBadGateway && status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout
	// The reason is written only for a transition: this runs once per routed response.
	if tr, changed := w.h.Passive(endpoint, ok, "", decided, w.cfg.Now()); changed {
		tr.Reason = fmt.Sprintf("response status %d", status)
		w.note(tr)
	}
}

func (w *healthWatch) note(tr fleet.Transition) {
	to := "unhealthy"
	if tr.Healthy {
		to = "healthy"
	}
	w.transitions.WithLabelValues(to, tr.Source).Inc()
	if tr.Healthy {
		w.log.Info("endpoint healthy again: back among the candidates", "endpoint", tr.Addr, "source", tr.Source, "reason", tr.Reason)
	} else {
		w.log.Warn("endpoint unhealthy: left out of the candidates until it recovers (check the engine's logs and its /health)",
			"endpoint", tr.Addr, "source", tr.Source, "reason", tr.Reason)
	}
	w.refreshGauge()
}

func (w *healthWatch) refreshGauge() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unhealthy.Reset()
	for _, a := range w.h.Unhealthy(w.cfg.Now()) {
		w.unhealthy.WithLabelValues(a).Set(1)
	}
}

// run checks every endpoint of f each CheckInterval until ctx ends.
func (w *healthWatch) run(ctx context.Context, f *fleet.Set) {
	if w.cfg.CheckInterval <= 0 {
		return
	}
	t := time.NewTicker(w.cfg.CheckInterval)
	defer t.Stop()
	defer w.client.CloseIdleConnections()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		eps := f.Endpoints()
		w.h.Retain(eps)
		var wg sync.WaitGroup
		for _, ep := range eps {
			wg.Go(func() { w.checkOne(ctx, ep) })
		}
		wg.Wait()
		w.refreshGauge() // passive ejections end with time
	}
}

// checkOne checks ep once and records the outcome. A refused connection is also a failed
// response (a passive observation): nothing listens there, so the endpoint leaves the next
// decision at once rather than after ActiveFailures checks; recovery is as for any ejection.
func (w *healthWatch) checkOne(ctx context.Context, ep string) {
	ok, refused, reason := w.check(ctx, ep)
	if ctx.Err() != nil {
		return
	}
	if ok {
		w.checks.WithLabelValues("ok").Inc()
	} else {
		w.checks.WithLabelValues("failed").Inc()
	}
	now := w.cfg.Now()
	if refused {
		if tr, changed := w.h.Passive(ep, false, reason, time.Time{}, now); changed {
			w.note(tr)
		}
	}
	if tr, changed := w.h.Active(ep, ok, reason, now); changed {
		w.note(tr)
	}
}

// check asks ep's health path; refused says the connection was refused.
func (w *healthWatch) check(ctx context.Context, ep string) (ok, refused bool, reason string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ep+w.cfg.CheckPath, nil)
	if err != nil {
		return false, false, err.Error()
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return false, errors.Is(err, syscall.ECONNREFUSED), "check failed: " + err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return false, false, fmt.Sprintf("GET %s answered %d", w.cfg.CheckPath, resp.StatusCode)
	}
	return true, false, "GET " + w.cfg.CheckPath + " answered " + resp.Status
}
