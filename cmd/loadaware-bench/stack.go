package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/simpleengine"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/picker"
)

// stackConfig describes a live stack: simple engines, the real picker in-process, and the
// gateway in front, all on loopback ports.
type stackConfig struct {
	engines    []simpleengine.Config
	policy     string
	beta       float64
	mode       gateway.BodyMode
	onOutcome  func(gateway.Outcome)
	cache      picker.CacheView // nil: none
	observer   picker.Observer  // nil: none
	pickerLog  *slog.Logger
	gatewayLog *slog.Logger
}

// stack is a running live stack.
type stack struct {
	engines []*simpleengine.Server
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
	for i, ec := range cfg.engines {
		e, err := simpleengine.Start(ec)
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
		Endpoints: addrs, Policy: cfg.policy, Beta: cfg.beta, BodyMode: mode,
		Cache: cfg.cache, Observer: cfg.observer, Explain: extproc.ExplainAll,
	}, cfg.pickerLog)
	if err != nil {
		return nil, fmt.Errorf("start the picker: %w", err)
	}
	s.gw, err = gateway.Dial(s.app.GRPCAddr(), gateway.Options{
		Mode: cfg.mode, GenerateRequestID: true, OnOutcome: cfg.onOutcome, Logger: cfg.gatewayLog,
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

// inFlight reads the picker's /metrics and sums loadaware_inflight_requests over endpoints and
// phases.
func (s *stack) inFlight(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.app.MetricsAddr()+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read the picker's metrics: %w", err)
	}
	defer resp.Body.Close()
	return sumMetric(resp.Body, "loadaware_inflight_requests")
}

// sumMetric sums the samples of one metric in Prometheus text format.
func sumMetric(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	sum, found := 0.0, false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("the picker exports no %s", name)
	}
	return sum, nil
}
