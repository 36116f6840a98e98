package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/live"
	"github.com/loadaware/loadaware-epp/bench/promtext"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/extproc"
)

// stackConfig describes a live stack: near-instant engines (bench/sim on the wall clock, see
// instantModel), the real picker in-process, and the gateway in front, all on loopback ports.
type stackConfig struct {
	engines   int
	policy    string
	beta      float64
	mode      gateway.BodyMode
	onOutcome func(gateway.Outcome)
	log       *slog.Logger
	// adminToken allows POST /admin/config on the picker; empty: run-time changes refused.
	adminToken string
	// slowdown, when positive, runs the calibrated engine model at that step-time factor
	// instead of the near-instant one (instantModel).
	slowdown float64
}

// instantModel is the calibrated engine model with every step 10,000 times shorter (a few
// microseconds) and no output cost: engines that answer as soon as they read a request, so
// what a load run measures is the gateway and the picker.
func instantModel() sim.Config {
	m := sim.DefaultConfig()
	m.Slowdown, m.OutputCost = 1e-4, 0
	return m
}

// stack is a running live stack.
type stack struct {
	engines []*live.Engine
	app     *app.App
	gw      *gateway.Gateway
	srv     *http.Server
	url     string // the gateway's base URL
}

func startStack(ctx context.Context, cfg stackConfig) (s *stack, err error) {
	s = &stack{}
	defer func() {
		if err != nil {
			_ = s.close()
		}
	}()
	var addrs []string
	for i := range cfg.engines {
		model := instantModel()
		if cfg.slowdown > 0 {
			model = sim.DefaultConfig()
			model.Slowdown = cfg.slowdown
		}
		e, err := live.StartEngine(live.EngineConfig{Model: model, IP: "127.0.0.1", Logger: cfg.log})
		if err != nil {
			return nil, fmt.Errorf("start engine %d: %w", i, err)
		}
		s.engines = append(s.engines, e)
		addrs = append(addrs, e.Addr())
	}
	mode := extproc.FullDuplex
	if cfg.mode == gateway.Buffered {
		mode = extproc.Buffered
	}
	s.app, err = app.Start(ctx, app.Config{
		GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0",
		Endpoints: addrs, Policy: cfg.policy, Beta: cfg.beta, BodyMode: mode, Explain: extproc.ExplainAll, AdminToken: cfg.adminToken,
	}, cfg.log)
	if err != nil {
		return nil, fmt.Errorf("start the picker: %w", err)
	}
	s.gw, err = gateway.Dial(s.app.GRPCAddr(), gateway.Options{
		Mode: cfg.mode, GenerateRequestID: true, OnOutcome: cfg.onOutcome, Logger: cfg.log,
	})
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the gateway on a loopback port: %w", err)
	}
	s.srv = &http.Server{Handler: s.gw, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(lis) }()
	s.url = "http://" + lis.Addr().String()
	return s, nil
}

func (s *stack) close() error {
	var errs []error
	if s.srv != nil {
		errs = append(errs, s.srv.Close())
	}
	if s.gw != nil {
		errs = append(errs, s.gw.Close())
	}
	if s.app != nil {
		errs = append(errs, s.app.Close())
	}
	for _, e := range s.engines {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}

// inFlight reads the picker's loadaware_inflight_requests, summed over endpoints and phases.
func (s *stack) inFlight(ctx context.Context) (float64, error) {
	p, err := promtext.Get(ctx, http.DefaultClient, "http://"+s.app.MetricsAddr()+"/metrics")
	if err != nil {
		return 0, fmt.Errorf("read the picker's metrics: %w", err)
	}
	if !p.Has("loadaware_inflight_requests") {
		return 0, errors.New("the picker exports no loadaware_inflight_requests")
	}
	return p.Sum("loadaware_inflight_requests"), nil
}
