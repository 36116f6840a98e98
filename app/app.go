// Package app wires the picker's parts into a running service: the ext_proc gRPC server
// (with health), the gRPC health port, and the metrics/admin HTTP server. Both
// cmd/loadaware-epp and the benchmark's live mode start the service through Start, so
// they run the same code.
package app

import (
	"context"
	"errors"
	"fmt"
	"github.com/loadaware/loadaware-epp/enginemetrics"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/cachealarm"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/grpcbuf"
	"github.com/loadaware/loadaware-epp/h2gate"
	"github.com/loadaware/loadaware-epp/kvevents"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/replica"
	"github.com/loadaware/loadaware-epp/scoring"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Config is everything Start needs. The zero value of a field means its default.
type Config struct {
	GRPCAddr    string // ext_proc (and health); default ":9002"
	HealthAddr  string // gRPC health only; default ":9003"; "-" disables it
	MetricsAddr string // /metrics, /healthz, /readyz, /admin; default ":9090"

	SecureServing bool   // TLS on the ext_proc port (GIE's default)
	CertPath      string // directory with tls.crt and tls.key; empty: a self-signed certificate

	Endpoints    []string // static endpoints (canonical ip:port); empty: wait for discovery
	Policy       string   // default "loadaware"
	Beta         float64  // loadaware's beta (used as given: 0 is a valid beta)
	SessionKey   string   // default "x-user-id"
	MaxEndpoints int      // default 1
	BaseModels   []string // the engines' served model names; another model names a LoRA adapter (picker.Options.BaseModels)
	// AdapterCost is the LoRA residency term (picker.Options.AdapterCost), read from the
	// engines' vllm:lora_requests_info through the engine-metrics scrape; zero: off.
	AdapterCost  picker.AdapterCost
	MaxBodyBytes int64 // default extproc.DefaultMaxBodySize
	BodyMode     extproc.BodyMode
	OmitScores   bool // leave the candidates' scores and the reason out of the dynamic metadata

	AdminToken string // bearer token for POST /admin/config; empty: changes refused

	// Hardening (see docs/security.md); zero values take the defaults.
	Limits             extproc.Limits      // ext_proc streams, buffered bytes, idle timeout
	Explain            extproc.ExplainMode // zero: only requests carrying AdminToken get the decision header
	MaxPromptBytes     int                 // 0: picker.DefaultMaxPromptBytes; negative: no bound
	LargeTokenizations int                 // prompts over picker.LargePromptBytes tokenized at once; 0: picker's default; negative: no bound
	LargeTokenizeCPU   float64             // share of one CPU those tokenizations may use (picker.Options.LargeTokenizeCPU); 0: picker's default; negative: no budget
	LargeTokenizeBurst time.Duration       // CPU time they may use at once above it; 0: picker's default
	ClientCA           string              // PEM file: ext_proc requires a client certificate it signed (mTLS)
	MaxGRPCConns       int                 // 0: DefaultMaxGRPCConns
	MaxHTTPConns       int                 // 0: DefaultMaxHTTPConns
	MaxConnsPerIP      int                 // metrics and health ports, per client IP; 0: DefaultMaxConnsPerIP
	ConnReadRate       int64               // bytes/s one ext_proc connection may send; 0: DefaultConnReadRate; negative: no limit
	ConnReadBurst      int64               // bytes above ConnReadRate at once; 0: DefaultConnReadBurst
	ConnStreamRate     int64               // ext_proc streams/s one connection may open; 0: DefaultConnStreamRate; negative: no limit
	ConnStreamBurst    int64               // streams above ConnStreamRate at once; 0: DefaultConnStreamBurst
	MaxMessageBytes    int                 // largest ext_proc message received; 0: DefaultMaxMessageBytes
	Health             HealthConfig        // passive and active endpoint health

	// EngineMetricsInterval is how often the engines' /metrics are scraped while the policy
	// reads them (scoring.NeedsEngineMetrics); 0: enginemetrics.DefaultInterval (GIE's 50 ms);
	// negative: never (those policies then see no engine metrics).
	EngineMetricsInterval time.Duration

	ImbalanceWindow   time.Duration // default 60s
	ImbalanceInterval time.Duration // default 250ms

	// LMCache, when set, embeds the LMCache controller: its index is the cache view and
	// learns which prompts went where (silent-miss detection). It overrides Cache.
	LMCache *LMCacheConfig

	// CacheSource says which cache view to use with KVEvents: picker.SourceVLLMEvents or
	// picker.SourceBoth (the longer prefix of LMCache and vLLM events per endpoint).
	CacheSource string
	// KVEvents, when set, follows the engines' vLLM KV cache events (the view CacheSource
	// names). It overrides Cache.
	KVEvents *KVEventsConfig

	// Replicas, when set, shares the LMCache index and the bookings with the picker's other
	// replicas over NATS; nil: a lone picker, exactly as without it.
	Replicas *ReplicaConfig
	// StateFile, when set, saves the LMCache index on an interval and loads it at start.
	StateFile *StateFileConfig

	// CacheAlarm, when set, raises the cache-signal-dead alarm (package cachealarm).
	CacheAlarm *CacheAlarmConfig

	Cache     picker.CacheView // nil: no cache information
	Tokenizer picker.Tokenizer // nil: text and chat prompts routed on load alone
	Observer  picker.Observer  // nil: none

	// TokenizerMetrics, when set, registers the tokenizer's metrics on the service registry.
	TokenizerMetrics func(prometheus.Registerer) error

	// Registry collects every metric; nil: a new registry with Go and process collectors.
	Registry *prometheus.Registry
}

// App is a running service.
type App struct {
	cfg      Config
	log      *slog.Logger
	Fleet    *fleet.Set
	Picker   *picker.Picker
	Health   *extproc.Health
	Registry *prometheus.Registry

	grpcLis, healthLis, metricsLis net.Listener
	grpcSrv, healthSrv             *grpc.Server
	httpSrv                        *http.Server
	LMCacheIndex                   *lmcache.Index       // nil without LMCache
	LMCacheServer                  *lmcache.Server      // nil without LMCache
	KVEventsIndex                  *kvindex.Index       // nil without vLLM KV events
	KVEventsSubscriber             *kvevents.Subscriber // nil without vLLM KV events
	Replica                        *replica.Replica     // nil without --nats-url
	gate                           *replica.Gate        // nil unless the index is shared or persisted
	kvSnapshots                    *replica.KVSnapshots // the KV events streams from the peers; nil without both
	health                         *healthWatch
	refusedConns                   *prometheus.CounterVec
	connRate                       *connRate              // nil: ext_proc reads are not rate-limited
	streamRate                     *streamRate            // nil: ext_proc streams are not rate-limited
	extConns                       *extConns              // nil: neither of the two is on
	CacheAlarm                     *cachealarm.Watch      // nil without CacheAlarm
	EngineMetrics                  *enginemetrics.Scraper // nil when EngineMetricsInterval is negative
	obs                            *observed

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start listens on every port and serves until Close. It returns once all listeners are
// bound, so their addresses can be read at once.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *App, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	setDefaults(&cfg)
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	a := &App{cfg: cfg, log: log, Fleet: fleet.New(), Health: extproc.NewHealth(), Registry: reg}
	a.Fleet.SetClock(time.Now)
	if err := a.newCacheAlarm(cfg.CacheAlarm, cfg.Tokenizer != nil, reg); err != nil {
		return nil, err
	}
	if cfg.LMCache != nil {
		if err := a.newLMCache(*cfg.LMCache, reg); err != nil {
			return nil, err
		}
		cfg.Cache = picker.LMCacheView{Index: a.LMCacheIndex}
		cfg.Observer = a.LMCacheIndex
	}
	if cfg.KVEvents != nil {
		if err := a.newKVEvents(&cfg, reg); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil { // its loops start with the endpoint set, before the ports are bound
				a.KVEventsSubscriber.Close()
			}
		}()
	}
	if a.health, err = newHealthWatch(cfg.Health, log, reg); err != nil {
		return nil, err
	}
	a.refusedConns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loadaware_connections_refused_total",
		Help: "Connections closed at accept because their IP already held --max-connections-per-ip on the port.",
	}, []string{"port"})
	if err := reg.Register(a.refusedConns); err != nil {
		return nil, err
	}
	if cfg.ConnReadRate > 0 || cfg.ConnStreamRate > 0 {
		a.extConns = newExtConns()
	}
	if cfg.ConnReadRate > 0 {
		maxBody := cfg.MaxBodyBytes
		if maxBody <= 0 {
			maxBody = extproc.DefaultMaxBodySize
		}
		if a.connRate, err = newConnRate(cfg.ConnReadRate, cfg.ConnReadBurst, maxBody, a.extConns, log, reg); err != nil {
			return nil, err
		}
	}
	if cfg.ConnStreamRate > 0 {
		if a.streamRate, err = newStreamRate(cfg.ConnStreamRate, cfg.ConnStreamBurst, a.extConns, log, reg); err != nil {
			return nil, err
		}
	}
	params := scoring.DefaultParams()
	params.Beta = cfg.Beta
	cfg.Observer = a.observer(cfg.Observer)
	a.obs.view, a.obs.tokenizer = cfg.Cache, cfg.Tokenizer
	var engines picker.EngineView
	if cfg.EngineMetricsInterval >= 0 {
		a.EngineMetrics, err = enginemetrics.New(enginemetrics.Config{Interval: cfg.EngineMetricsInterval,
			Endpoints: func() []string { return a.Fleet.View().Addrs() },
			Needed:    func() bool { return a.Picker.NeedsEngineMetrics() },
			Logger:    log, Registerer: reg, Follow: a.scrapeFollower(), FollowInterval: a.followInterval()})
		if err != nil {
			return nil, err
		}
		engines = a.EngineMetrics
	}
	popts := picker.Options{
		Fleet: a.Fleet, Policy: cfg.Policy, Params: params, Cache: cfg.Cache, Tokenizer: cfg.Tokenizer,
		Observer: cfg.Observer, Health: a.health.h, MaxEndpoints: cfg.MaxEndpoints, BaseModels: cfg.BaseModels, MaxPromptBytes: cfg.MaxPromptBytes, LargeTokenizations: cfg.LargeTokenizations, LargeTokenizeCPU: cfg.LargeTokenizeCPU, LargeTokenizeBurst: cfg.LargeTokenizeBurst, Logger: log, Registerer: reg,
		Engines: engines, AdapterCost: cfg.AdapterCost, RankMetrics: cfg.KVEvents != nil && cfg.KVEvents.RankMetrics,
	}
	if a.EngineMetrics != nil && cfg.AdapterCost != (picker.AdapterCost{}) {
		popts.Adapters = a.EngineMetrics
	}
	p, err := picker.New(popts)
	if err != nil {
		return nil, err
	}
	a.Picker = p
	if len(cfg.Endpoints) > 0 {
		a.UpdateEndpoints(cfg.Endpoints)
	}
	if cfg.TokenizerMetrics != nil {
		if err := cfg.TokenizerMetrics(reg); err != nil {
			return nil, err
		}
	}
	imb := fleet.NewImbalance(cfg.ImbalanceWindow)
	if err := reg.Register(fleet.Collector{Set: a.Fleet, Imbalance: imb}); err != nil {
		return nil, err
	}
	adm, err := newAdmin(p, cfg.AdminToken, log, reg)
	if err != nil {
		return nil, err
	}
	var pacer func(context.Context) extproc.Pacer
	if a.connRate != nil {
		pacer = a.connRate.pacer
	}
	var received func(context.Context, int) // the transport gate's, set below once it exists
	ext, err := extproc.NewServer(p, extproc.Config{
		BodyMode: cfg.BodyMode, MaxBodyBytes: cfg.MaxBodyBytes, SessionHeader: cfg.SessionKey, Logger: log, Registerer: reg,
		OmitScores: cfg.OmitScores,
		Limits:     cfg.Limits, Explain: cfg.Explain, AdminToken: cfg.AdminToken, OnResponse: a.health.observe,
		Pacer: pacer, Received: func(ctx context.Context, n int) { received(ctx, n) },
	})
	if err != nil {
		return nil, err
	}

	creds := insecure.NewCredentials()
	if cfg.SecureServing {
		tc, err := serverTLS(cfg.CertPath, cfg.ClientCA)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	// The ext_proc server's admission: at most --max-streams + extproc.TransportSlack streams
	// (decision 1131), each message over gatedMessageBytes taken from --max-buffered-bytes
	// as its length arrives, before grpc-go opens the stream's window to it; one message's
	// worth of overdraft for a length split across reads (decision 1180).
	gate := h2gate.New(h2gate.Config{Take: ext.TakeBuffered, Give: ext.GiveBuffered, Refused: ext.TransportRefused,
		Threshold: gatedMessageBytes, MaxMessage: int64(cfg.MaxMessageBytes), Overdraft: int64(cfg.MaxMessageBytes)})
	received = gate.Received
	// Messages are received into buffers that are not cleared first (decision 1182).
	admit := ext.Admit
	if a.streamRate != nil {
		admit = a.streamRate.tap(admit)
	}
	opts := append(grpcOptions(gate.Creds(creds)), grpc.InTapHandle(admit), grpc.MaxRecvMsgSize(cfg.MaxMessageBytes))
	opts = append(opts, grpcbuf.ServerOptions()...)
	a.grpcSrv = grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(a.grpcSrv, ext)
	healthpb.RegisterHealthServer(a.grpcSrv, a.Health)

	ctx, a.cancel = context.WithCancel(ctx)
	if err := a.startReplica(ctx, reg); err != nil {
		a.cancel()
		return nil, err
	}
	if err := a.bind(ctx, cfg); err != nil {
		a.cancel()
		a.closeListeners()
		if a.Replica != nil {
			_ = a.Replica.Close()
		}
		return nil, err
	}
	a.httpSrv = newHTTPServer(a.httpHandler(adm))
	a.goServe("ext_proc gRPC", func() error { return a.grpcSrv.Serve(a.grpcLis) })
	if a.healthSrv != nil {
		a.goServe("gRPC health", func() error { return a.healthSrv.Serve(a.healthLis) })
	}
	a.goServe("metrics HTTP", func() error { return a.httpSrv.Serve(a.metricsLis) })
	a.wg.Go(func() { a.health.run(ctx, a.Fleet) })
	if a.EngineMetrics != nil {
		a.wg.Go(func() { a.EngineMetrics.Run(ctx) })
	}
	if a.CacheAlarm != nil {
		a.wg.Go(func() { a.runCacheAlarm(ctx, *cfg.CacheAlarm) })
	}
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		select {
		case <-a.Fleet.Ready():
			select {
			case <-a.kvEventsReady(): // the index rebuilt from the engines' replays
			case <-ctx.Done():
				return
			}
			select {
			case <-a.replicaReady(): // the index taken from a peer
			case <-ctx.Done():
				return
			}
			a.Health.SetServing(true)
			log.Info("endpoint set known: serving", "endpoints", len(a.Fleet.Endpoints()))
		case <-ctx.Done():
		}
	}()
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(cfg.ImbalanceInterval)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				imb.Sample(now, a.Fleet.All())
			case <-ctx.Done():
				return
			}
		}
	}()
	log.Info("loadaware-epp started", "ext_proc", a.GRPCAddr(), "tls", cfg.SecureServing, "metrics", a.MetricsAddr(),
		"policy", cfg.Policy, "beta", cfg.Beta, "body_mode", cfg.BodyMode.String(), "endpoints", len(cfg.Endpoints),
		"explain", cfg.Explain.String(), "mtls", cfg.ClientCA != "", "health_checks", cfg.Health.CheckInterval.String())
	if cfg.Explain == extproc.ExplainToken && cfg.AdminToken == "" {
		log.Info("no admin token: no request gets the x-loadaware-decision header (set --admin-token, or --explain=all for a demo)")
	}
	return a, nil
}

// bind opens every listener and starts the LMCache controller's sockets, so that Start
// fails before serving anything when a port is taken.
func (a *App) bind(ctx context.Context, cfg Config) error {
	var err error
	if a.grpcLis, err = listen("ext_proc gRPC", cfg.GRPCAddr, "--grpc-port"); err != nil {
		return err
	}
	// No per-IP cap on ext_proc: one Envoy opens a connection per worker thread.
	a.grpcLis = limitListener(a.grpcLis, cfg.MaxGRPCConns, 0, nil)
	if a.extConns != nil { // one wrapper for both per-connection limits
		a.grpcLis = &extListener{Listener: a.grpcLis, conns: a.extConns, read: a.connRate, stream: a.streamRate}
	}
	if cfg.HealthAddr != "-" {
		if a.healthLis, err = listen("gRPC health", cfg.HealthAddr, "--grpc-health-port"); err != nil {
			return err
		}
		a.healthLis = limitListener(a.healthLis, cfg.MaxHTTPConns, cfg.MaxConnsPerIP, a.refusedConns.WithLabelValues("health"))
		a.healthSrv = grpc.NewServer(grpcOptions(nil)...)
		healthpb.RegisterHealthServer(a.healthSrv, a.Health)
	}
	if a.metricsLis, err = listen("metrics", cfg.MetricsAddr, "--metrics-port"); err != nil {
		return err
	}
	a.metricsLis = limitListener(a.metricsLis, cfg.MaxHTTPConns, cfg.MaxConnsPerIP, a.refusedConns.WithLabelValues("metrics"))
	if a.LMCacheServer != nil {
		if err := a.LMCacheServer.Start(ctx); err != nil {
			return fmt.Errorf("LMCache controller: %w", err)
		}
	}
	return nil
}

// closeListeners undoes a bind that failed part way.
func (a *App) closeListeners() {
	for _, l := range []net.Listener{a.grpcLis, a.healthLis, a.metricsLis} {
		if l != nil {
			l.Close()
		}
	}
}

func setDefaults(c *Config) {
	if c.GRPCAddr == "" {
		c.GRPCAddr = ":9002"
	}
	if c.HealthAddr == "" {
		c.HealthAddr = ":9003"
	}
	if c.MetricsAddr == "" {
		c.MetricsAddr = ":9090"
	}
	if c.Policy == "" {
		c.Policy = "loadaware"
	}
	if c.ImbalanceWindow <= 0 {
		c.ImbalanceWindow = time.Minute
	}
	if c.MaxGRPCConns == 0 {
		c.MaxGRPCConns = DefaultMaxGRPCConns
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxHTTPConns == 0 {
		c.MaxHTTPConns = DefaultMaxHTTPConns
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if c.ConnReadRate == 0 {
		c.ConnReadRate = DefaultConnReadRate
	}
	if c.ConnReadBurst <= 0 {
		c.ConnReadBurst = DefaultConnReadBurst
	}
	if c.ConnStreamRate == 0 {
		c.ConnStreamRate = DefaultConnStreamRate
	}
	if c.ConnStreamBurst <= 0 {
		c.ConnStreamBurst = DefaultConnStreamBurst
	}
	if c.ImbalanceInterval <= 0 {
		c.ImbalanceInterval = 250 * time.Millisecond
	}
}

func listen(what, addr, flag string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen for %s on %s: %v (choose a free port with %s)", what, addr, err, flag)
	}
	return l, nil
}

func (a *App) goServe(what string, serve func() error) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			a.log.Error(what+" server stopped", "err", err)
		}
	}()
}

// UpdateEndpoints replaces the endpoint set (static list or discovery) and everything
// that follows it: the LMCache allow-list and the routing history of departed endpoints.
func (a *App) UpdateEndpoints(addrs []string) {
	a.Fleet.Update(addrs)
	a.Picker.Forget(addrs)
	a.health.h.Retain(addrs)
	if a.Replica != nil {
		a.Replica.Forget(addrs)
	}
	if a.LMCacheServer != nil {
		a.LMCacheServer.SetAllowedIPs(addrs)
	}
	if a.KVEventsSubscriber != nil {
		a.KVEventsSubscriber.SetEndpoints(addrs)
	}
}

// GRPCAddr is the bound ext_proc address.
func (a *App) GRPCAddr() string { return a.grpcLis.Addr().String() }

// HealthAddr is the bound gRPC health address ("" when disabled).
func (a *App) HealthAddr() string {
	if a.healthLis == nil {
		return ""
	}
	return a.healthLis.Addr().String()
}

// MetricsAddr is the bound metrics/admin HTTP address.
func (a *App) MetricsAddr() string { return a.metricsLis.Addr().String() }

// Close stops every server: in-flight ext_proc streams get up to 5 seconds to finish.
func (a *App) Close() error {
	a.cancel()
	a.Health.SetServing(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := a.httpSrv.Shutdown(ctx)
	if a.LMCacheServer != nil {
		err = errors.Join(err, a.LMCacheServer.Close())
	}
	if a.KVEventsSubscriber != nil {
		err = errors.Join(err, a.KVEventsSubscriber.Close())
	}
	stopped := make(chan struct{})
	go func() {
		a.grpcSrv.GracefulStop()
		if a.healthSrv != nil {
			a.healthSrv.GracefulStop()
		}
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		a.grpcSrv.Stop()
		if a.healthSrv != nil {
			a.healthSrv.Stop()
		}
		<-stopped
	}
	if a.Replica != nil {
		err = errors.Join(err, a.Replica.Close())
	}
	a.wg.Wait()
	return err
}
