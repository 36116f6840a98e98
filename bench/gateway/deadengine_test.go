package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/extproc"
)

// killResult is what a load run with one engine killed part way saw.
type killResult struct {
	sent, failed int
	lastFailure  time.Duration // the latest send time, after the kill, of a request that failed (0: sent before it); negative if none failed
}

// runKill sends n requests open-loop at one per interval through the gateway to two
// engines, kills engine 1 (its server closes its listener and connections, as SIGKILL
// would) before request killAt, and reports the outcomes.
func runKill(t *testing.T, cfg app.Config, n, killAt int, interval time.Duration) killResult {
	t.Helper()
	var engines []*engine
	var addrs []string
	for range 2 {
		e := startEngine(t, func(ctx context.Context) error {
			select { // a short decode so requests overlap the kill
			case <-time.After(5 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		engines = append(engines, e)
		addrs = append(addrs, e.addr())
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.GRPCAddr, cfg.HealthAddr, cfg.MetricsAddr = "127.0.0.1:0", "-", "127.0.0.1:0"
	cfg.Endpoints, cfg.Policy, cfg.BodyMode = addrs, "roundrobin", extproc.FullDuplex
	a, err := app.Start(context.Background(), cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.Dial(a.GRPCAddr(), gateway.Options{Logger: quiet, ConnectTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer func() {
		srv.Close()
		_ = gw.Close()
		if err := a.Close(); err != nil {
			t.Errorf("close app: %v", err)
		}
	}()

	var mu sync.Mutex
	res := killResult{lastFailure: -1}
	var killed time.Time
	var wg sync.WaitGroup
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		if i == killAt {
			engines[1].kill()
			mu.Lock()
			killed = time.Now()
			mu.Unlock()
		}
		mu.Lock()
		sent := time.Now()
		afterKill := !killed.IsZero()
		mu.Unlock()
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":"m","prompt":[1,2,3,%d],"max_tokens":2,"stream":true}`, i)
			resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				ok = ok && rerr == nil && strings.Contains(string(b), "[DONE]")
			}
			mu.Lock()
			defer mu.Unlock()
			res.sent++
			if !ok {
				res.failed++
				at := time.Duration(0) // in flight at the kill
				if afterKill {
					at = sent.Sub(killed)
				}
				res.lastFailure = max(res.lastFailure, at)
			}
		})
	}
	wg.Wait()
	return res
}

// The engine-killed row of issue 10 through the Envoy stand-in: with a fallback list of
// two (--max-endpoints 2; the gateway, like Envoy with the shipped retry policy, tries the
// next endpoint on a connect failure) and active health checks, under 1% of requests fail
// and none later than a second after the kill. Without them, every other request after
// the kill fails.
func TestEngineKilledUnderLoad(t *testing.T) {
	const n, killAt = 400, 100
	interval := 10 * time.Millisecond // 100 req/s
	hardened := runKill(t, app.Config{MaxEndpoints: 2, Health: app.HealthConfig{CheckInterval: 100 * time.Millisecond}}, n, killAt, interval)
	t.Logf("fallback list + health checks: %d of %d failed, the last sent %v after the kill", hardened.failed, hardened.sent, hardened.lastFailure)
	if hardened.sent != n || float64(hardened.failed) >= 0.01*n {
		t.Errorf("with the fallback list and health checks %d of %d requests failed, want under 1%%", hardened.failed, hardened.sent)
	}
	if hardened.lastFailure > time.Second {
		t.Errorf("a request sent %v after the kill failed, want every failure within the first second", hardened.lastFailure)
	}
	baseline := runKill(t, app.Config{MaxEndpoints: 1}, n, killAt, interval)
	t.Logf("single endpoint, no health checks: %d of %d failed", baseline.failed, baseline.sent)
	if baseline.failed < (n-killAt)/4 {
		t.Errorf("without fallbacks only %d of %d requests failed: the test no longer kills an engine", baseline.failed, baseline.sent)
	}
}
