// Package stack starts a live stack on loopback ports: simulated engines on the wall clock
// (bench/live, the bench/sim model), the real picker in-process (app), and the gateway
// (bench/gateway) in front. It is what gwload measures and what the command tests drive.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/live"
	"github.com/loadaware/loadaware-epp/bench/promtext"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/extproc"
)

// Config describes a live stack.
type Config struct {
	Engines   int
	Policy    string
	Beta      float64
	Mode      gateway.BodyMode
	OnOutcome func(gateway.Outcome) // the gateway's report of each request, if not nil
	Log       *slog.Logger
	// AdminToken allows POST /admin/config on the picker; empty: run-time changes refused.
	AdminToken string
	// Slowdown, when positive, runs the calibrated engine model at that step-time factor
	// instead of the near-instant one (InstantModel).
	Slowdown float64
}

// InstantModel is the calibrated engine model with every step 10,000 times shorter (a few
// microseconds) and no output cost: engines that answer as soon as they read a request, so
// what a load run measures is the gateway and the picker.
func InstantModel() sim.Config {
	m := sim.DefaultConfig()
	m.Slowdown, m.OutputCost = 1e-4, 0
	return m
}

// Stack is a running live stack.
type Stack struct {
	Engines []*live.Engine
	App     *app.App
	Gateway *gateway.Gateway
	URL     string // the gateway's base URL
	srv     *http.Server
}

// Start starts the engines, the picker routing between them and the gateway; the caller
// closes the stack.
func Start(ctx context.Context, cfg Config) (s *Stack, err error) {
	s = &Stack{}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	var addrs []string
	for i := range cfg.Engines {
		model := InstantModel()
		if cfg.Slowdown > 0 {
			model = sim.DefaultConfig()
			model.Slowdown = cfg.Slowdown
		}
		e, err := live.StartEngine(live.EngineConfig{Model: model, IP: "127.0.0.1", Logger: cfg.Log})
		if err != nil {
			return nil, fmt.Errorf("start engine %d: %w", i, err)
		}
		s.Engines = append(s.Engines, e)
		addrs = append(addrs, e.Addr())
	}
	mode := extproc.FullDuplex
	if cfg.Mode == gateway.Buffered {
		mode = extproc.Buffered
	}
	s.App, err = app.Start(ctx, app.Config{
		GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0",
		Endpoints: addrs, Policy: cfg.Policy, Beta: cfg.Beta, BodyMode: mode, Explain: extproc.ExplainAll, AdminToken: cfg.AdminToken,
	}, cfg.Log)
	if err != nil {
		return nil, fmt.Errorf("start the picker: %w", err)
	}
	s.Gateway, err = gateway.Dial(s.App.GRPCAddr(), gateway.Options{
		Mode: cfg.Mode, GenerateRequestID: true, OnOutcome: cfg.OnOutcome, Logger: cfg.Log,
	})
	if err != nil {
		return nil, err
	}
	if s.srv, s.URL, err = gateway.ServeLoopback(s.Gateway); err != nil {
		return nil, err
	}
	return s, nil
}

// Close stops the gateway, the picker and the engines.
func (s *Stack) Close() error {
	var errs []error
	if s.srv != nil {
		errs = append(errs, s.srv.Close())
	}
	if s.Gateway != nil {
		errs = append(errs, s.Gateway.Close())
	}
	if s.App != nil {
		errs = append(errs, s.App.Close())
	}
	for _, e := range s.Engines {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}

// InFlight reads the picker's loadaware_inflight_requests, summed over endpoints and phases.
func (s *Stack) InFlight(ctx context.Context) (float64, error) {
	p, err := promtext.Get(ctx, http.DefaultClient, "http://"+s.App.MetricsAddr()+"/metrics")
	if err != nil {
		return 0, fmt.Errorf("read the picker's metrics: %w", err)
	}
	if !p.Has("loadaware_inflight_requests") {
		return 0, errors.New("the picker exports no loadaware_inflight_requests")
	}
	return p.Sum("loadaware_inflight_requests"), nil
}
