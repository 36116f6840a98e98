package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/loadaware/loadaware-epp/enginemetrics"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/fleet/kube"
	"github.com/loadaware/loadaware-epp/gctune"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/scoring"
	"github.com/loadaware/loadaware-epp/tokenize"
	"github.com/prometheus/client_golang/prometheus"
)

// options are the parsed flags of serve.
type options struct {
	grpcPort, healthPort, metricsPort int
	secure                            bool
	certPath                          string
	endpoints                         string
	policy                            string
	refreshMetrics                    time.Duration
	beta                              float64
	sessionKey                        string
	maxEndpoints                      int
	maxBodyBytes                      int64
	endpointScores                    bool
	bodyMode                          string
	adminToken                        string
	logLevel, logFormat               string
	bindAddress                       string
	tokenizer, model                  string
	baseModels                        string
	loraCost                          string
	tokenizerFromEngine               bool
	engineTimeout                     time.Duration
	gcPercent                         int
	memoryLimit                       int64
	heapPretouch                      bool

	lmPull, lmReply, lmHeartbeat int
	lmHeartbeatURL               string
	lmHashSeed                   string
	lmChunkSize                  int
	lmKeyFormat                  string
	lmAllow                      string
	lmInstanceTimeout            time.Duration

	kv   kvFlags // --cache-source and the vLLM KV events source
	rep  replicaFlags
	hard hardening

	alarm alarmFlags // the cache-signal-dead alarm

	// Kubernetes discovery (GIE's flag names).
	kube kube.Config

	// GIE chart flags this build accepts but does not use.
	unsupported map[string]*string
}

// gieFlags are flags GIE's Helm chart passes to its picker. A drop-in image must accept
// them; the ones we do not implement yet are logged at start.
var gieFlags = []string{"config-file", "tracing", "ha-enable-leader-election", "metrics-endpoint-auth", "kube-config",
	"model-server-metrics-port", "model-server-metrics-path", "model-server-metrics-scheme",
	"refresh-prometheus-metrics-interval", "total-queued-requests-metric", "kv-cache-usage-percentage-metric"}

func newFlagSet(o *options, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("loadaware-epp serve", flag.ContinueOnError)
	fs.IntVar(&o.grpcPort, "grpc-port", 9002, "ext_proc gRPC port (GIE convention)")
	fs.IntVar(&o.healthPort, "grpc-health-port", 9003, "gRPC health port (health is also served on --grpc-port); 0 disables it")
	fs.IntVar(&o.metricsPort, "metrics-port", 9090, "Prometheus /metrics, /healthz, /readyz and /admin/config")
	fs.StringVar(&o.bindAddress, "bind-address", "", "address to listen on (default: all interfaces)")
	fs.IntVar(&o.gcPercent, "gc-percent", gctune.DefaultGCPercent, "GOGC under a memory limit (--memory-limit, the container's, or GOMEMLIMIT); without one, and when GOGC is set, the collector is left as it is")
	fs.Int64Var(&o.memoryLimit, "memory-limit", 0, "soft memory limit of the Go heap in bytes; 0: 90% of the container's memory limit, if any; -1: none")
	fs.BoolVar(&o.heapPretouch, "heap-pretouch", false, "under a memory limit of the picker's own (--memory-limit or the container's; GOGC and GOMEMLIMIT unset), write the heap once at start until the runtime holds the limit (93% of it unless GODEBUG has madvdontneed=0) and collect only at the limit (GOGC off), so a burst of input does not fault a new heap in while it arrives; RSS stays at about the limit")
	fs.BoolVar(&o.secure, "secure-serving", true, "serve ext_proc over TLS (a self-signed certificate unless --cert-path)")
	fs.StringVar(&o.certPath, "cert-path", "", "directory holding tls.crt and tls.key for --secure-serving")
	fs.StringVar(&o.endpoints, "endpoints", "", "static endpoint list: ip:port,ip:port,... (IPv6 as [addr]:port); or discover them with --pool-name or --endpoint-selector")
	o.kube.RegisterFlags(fs)
	fs.StringVar(&o.policy, "policy", "loadaware", "routing policy: "+strings.Join(scoring.Names, ", "))
	fs.DurationVar(&o.refreshMetrics, "refresh-metrics-interval", enginemetrics.DefaultInterval, "how often each engine's /metrics (running, waiting, KV usage) is scraped while the policy reads them (gie-default, llmd-*); GIE's flag and default; 0 disables")
	beta := 1.0
	if v := getenv("LOADAWARE_BETA"); v != "" {
		beta = math.NaN() // checked below: the env value must parse
		if b, err := strconv.ParseFloat(v, 64); err == nil {
			beta = b
		}
	}
	fs.Float64Var(&o.beta, "beta", beta, "loadaware's load weight: 0 = pure cache affinity (env LOADAWARE_BETA)")
	fs.StringVar(&o.sessionKey, "session-key", "x-user-id", "request header that carries the session key")
	fs.IntVar(&o.maxEndpoints, "max-endpoints", 1, "endpoints in x-gateway-destination-endpoint (an ordered fallback list when > 1)")
	fs.Int64Var(&o.maxBodyBytes, "max-body-bytes", extproc.DefaultMaxBodySize, "largest request body the picker reads; larger gets 413")
	fs.BoolVar(&o.endpointScores, "endpoint-scores", true, "put every candidate's score (envoy.lb x-gateway-destination-endpoint-scores) and the decision's reason (loadaware.decision) in the dynamic metadata, for Envoy's access log")
	fs.StringVar(&o.bodyMode, "body-mode", "full-duplex", "body mode when Envoy sends no protocol_config: full-duplex or buffered")
	fs.StringVar(&o.adminToken, "admin-token", getenv("LOADAWARE_ADMIN_TOKEN"), "bearer token that allows POST /admin/config (env LOADAWARE_ADMIN_TOKEN); empty: changes refused")
	fs.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json or model directory of the served model (tokenizes prompts exactly as vLLM)")
	fs.StringVar(&o.model, "model", "", "served model ORG/NAME: its tokenizer is looked up in the HuggingFace cache when --tokenizer is not given")
	fs.StringVar(&o.baseModels, "base-models", "", "the engines' served model names (vLLM --served-model-name), comma-separated: a request whose model is none of them names a LoRA adapter and is credited only with that adapter's cached blocks (needs --kv-events-extra-keys); empty: every request is for the base model")
	fs.StringVar(&o.loraCost, "lora-residency-cost", fmt.Sprintf("%d,%d", picker.DefaultAdapterCost.FreeSlot, picker.DefaultAdapterCost.SlotsFull), "FREE,FULL: requests in flight an engine counts extra for a LoRA adapter's request (--base-models) when it does not run the adapter and has a free adapter slot (FREE) or none (FULL), from the engines' vllm:lora_requests_info (scraped every --refresh-metrics-interval); 0,0 turns the term off")
	fs.BoolVar(&o.tokenizerFromEngine, "tokenizer-from-engine", false, "ask the engines' POST /tokenize for prompts the local tokenizer cannot reproduce (or for all, with no local tokenizer)")
	fs.DurationVar(&o.engineTimeout, "tokenize-timeout", 2*time.Second, "timeout of one engine /tokenize call")
	fs.IntVar(&o.lmPull, "lmcache-pull-port", 9000, "LMCache controller PULL port the engines' workers push cache events to; 0 disables the controller")
	fs.IntVar(&o.lmReply, "lmcache-reply-port", 9001, "LMCache controller reply (ROUTER) port for worker registration; 0 disables it")
	fs.IntVar(&o.lmHeartbeat, "lmcache-heartbeat-port", 0, "LMCache heartbeat (ROUTER) port for the newest workers; 0 (default) disables it")
	fs.StringVar(&o.lmHeartbeatURL, "lmcache-heartbeat-url", "", "host:port of the heartbeat port as the workers reach it (told to them at registration)")
	fs.StringVar(&o.lmHashSeed, "lmcache-hash-seed", "", "the engines' PYTHONHASHSEED (default: env PYTHONHASHSEED, else 123 as the Production Stack chart sets)")
	fs.IntVar(&o.lmChunkSize, "lmcache-chunk-size", 256, "the engines' LMCACHE_CHUNK_SIZE")
	fs.StringVar(&o.lmKeyFormat, "lmcache-key-format", "v0.3", "chunk-key format: v0.3 (LMCache 0.3.x: None third element) or v0.4 (())")
	fs.StringVar(&o.lmAllow, "lmcache-allow-from", "fleet", "who may connect to the controller: fleet (only the endpoints' IPs) or any")
	fs.DurationVar(&o.lmInstanceTimeout, "lmcache-instance-timeout", 0, "drop an LMCache instance silent this long (heartbeating workers only); 0 = 6x the heartbeat period; negative = never")
	o.kv.register(fs)
	o.alarm.register(fs)
	o.hard.register(fs)
	o.rep.register(fs, getenv)
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error (debug logs every decision)")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json")
	// GIE compatibility.
	fs.Func("zap-encoder", "GIE compatibility: json or console (sets --log-format)", func(s string) error {
		switch s {
		case "json":
			o.logFormat = "json"
		case "console":
			o.logFormat = "text"
		default:
			return fmt.Errorf("use json or console")
		}
		return nil
	})
	fs.Func("v", "GIE compatibility: verbosity; 4 or more logs every decision (sets --log-level debug)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("use a number from 0")
		}
		if n >= 4 {
			o.logLevel = "debug"
		}
		return nil
	})
	o.unsupported = map[string]*string{}
	for _, name := range gieFlags {
		o.unsupported[name] = fs.String(name, "", "GIE compatibility: accepted, not supported yet")
	}
	fs.SetOutput(io.Discard)
	return fs
}

// removedFlags are flags earlier releases had, each with what replaced it, so that an
// upgrade keeping an old setting is told what to do rather than that the flag is unknown.
var removedFlags = map[string]string{
	"lmcache-zmtp-front": "the ZMTP front is the LMCache controller's only path since decision 1201 (it was on by default); drop the flag",
}

// removedFlag returns the first of args (up to a "--") naming a removed flag, in any of the
// forms the flag package accepts (-x, --x, --x=v), and what replaced it; "" when none does.
func removedFlag(args []string) (name, why string) {
	for _, a := range args {
		if a == "--" {
			break
		}
		n, ok := strings.CutPrefix(a, "-")
		if !ok {
			continue
		}
		n = strings.TrimPrefix(n, "-")
		n, _, _ = strings.Cut(n, "=")
		if why, ok := removedFlags[n]; ok {
			return n, why
		}
	}
	return "", ""
}

// parse reads the flags into an app.Config. Its errors are one line: what is wrong and
// what would be right.
func parse(args []string, getenv func(string) string) (app.Config, options, error) {
	var o options
	fs := newFlagSet(&o, getenv)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return app.Config{}, o, err
		}
		if name, why := removedFlag(args); name != "" {
			return app.Config{}, o, fmt.Errorf("--%s was removed: %s", name, why)
		}
		return app.Config{}, o, fmt.Errorf("%v (run loadaware-epp serve -h for the flags)", err)
	}
	if fs.NArg() > 0 {
		return app.Config{}, o, fmt.Errorf("unexpected argument %q: every setting is a --flag (run loadaware-epp serve -h)", fs.Arg(0))
	}
	if math.IsNaN(o.beta) {
		return app.Config{}, o, fmt.Errorf("LOADAWARE_BETA=%q is not a number: set it to e.g. 1.0, or pass --beta", getenv("LOADAWARE_BETA"))
	}
	if err := scoring.ValidateBeta(o.beta); err != nil {
		return app.Config{}, o, fmt.Errorf("--beta: %v", err)
	}
	if _, err := scoring.New(o.policy, scoring.DefaultParams(), scoring.NewState()); err != nil {
		return app.Config{}, o, fmt.Errorf("--policy: %v", err)
	}
	for _, p := range []struct {
		name string
		v    int
		zero bool
	}{{"grpc-port", o.grpcPort, false}, {"grpc-health-port", o.healthPort, true}, {"metrics-port", o.metricsPort, false},
		{"lmcache-pull-port", o.lmPull, true}, {"lmcache-reply-port", o.lmReply, true}, {"lmcache-heartbeat-port", o.lmHeartbeat, true}} {
		if p.v < 0 || p.v > 65535 || (p.v == 0 && !p.zero) {
			return app.Config{}, o, fmt.Errorf("--%s %d is not a port: use 1-65535", p.name, p.v)
		}
	}
	if o.maxEndpoints < 1 || o.maxEndpoints > 64 {
		return app.Config{}, o, fmt.Errorf("--max-endpoints %d: use 1 (no fallbacks) to 64", o.maxEndpoints)
	}
	if o.maxBodyBytes < 1024 {
		return app.Config{}, o, fmt.Errorf("--max-body-bytes %d is too small to hold a request: use at least 1024 (default %d)", o.maxBodyBytes, extproc.DefaultMaxBodySize)
	}
	mode, err := extproc.ParseBodyMode(o.bodyMode)
	if err != nil {
		return app.Config{}, o, fmt.Errorf("--body-mode: %v", err)
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return app.Config{}, o, err
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return app.Config{}, o, fmt.Errorf("--log-format %q: use text or json", o.logFormat)
	}
	lm, err := lmcacheConfig(o, getenv)
	if err != nil {
		return app.Config{}, o, err
	}
	source, lm, kv, err := o.kv.config(lm)
	if err != nil {
		return app.Config{}, o, err
	}
	if o.gcPercent < 1 {
		return app.Config{}, o, fmt.Errorf("--gc-percent %d: use a GOGC of at least 1 (default %d)", o.gcPercent, gctune.DefaultGCPercent)
	}
	if o.memoryLimit < -1 {
		return app.Config{}, o, fmt.Errorf("--memory-limit %d: use a limit in bytes, 0 for 90%% of the container's or -1 for none", o.memoryLimit)
	}
	if o.engineTimeout <= 0 {
		return app.Config{}, o, fmt.Errorf("--tokenize-timeout %v: use a positive duration such as 2s", o.engineTimeout)
	}
	if o.certPath != "" && !o.secure {
		return app.Config{}, o, fmt.Errorf("--cert-path is set but --secure-serving=false: drop one of them")
	}
	var eps []string
	switch {
	case o.endpoints != "" && o.kube.Mode() != kube.ModeOff:
		return app.Config{}, o, fmt.Errorf("--endpoints and Kubernetes discovery (--pool-name or --endpoint-selector) were both given: use one")
	case o.endpoints != "":
		if eps, err = fleet.ParseEndpoints(o.endpoints); err != nil {
			return app.Config{}, o, fmt.Errorf("--endpoints: %v", err)
		}
	case o.kube.Mode() == kube.ModeOff:
		return app.Config{}, o, fmt.Errorf("endpoint list is empty: pass --endpoints ip:port,... or discover the engines with --pool-name (InferencePool) or --endpoint-selector app=vllm --endpoint-target-ports 8000")
	default:
		if err := o.kube.Validate(); err != nil {
			return app.Config{}, o, err
		}
	}
	addr := func(port int) string { return net.JoinHostPort(o.bindAddress, strconv.Itoa(port)) }
	cfg := app.Config{
		GRPCAddr: addr(o.grpcPort), HealthAddr: addr(o.healthPort), MetricsAddr: addr(o.metricsPort),
		SecureServing: o.secure, CertPath: o.certPath, Endpoints: eps, Policy: o.policy, Beta: o.beta,
		SessionKey: o.sessionKey, MaxEndpoints: o.maxEndpoints, MaxBodyBytes: o.maxBodyBytes, BodyMode: mode,
		AdminToken: o.adminToken, LMCache: lm, OmitScores: !o.endpointScores, CacheSource: source, KVEvents: kv,
		BaseModels: splitList(o.baseModels),
	}
	if cfg.AdapterCost, err = parseAdapterCost(o.loraCost); err != nil {
		return app.Config{}, o, err
	}
	if o.healthPort == 0 {
		cfg.HealthAddr = "-"
	}
	if o.refreshMetrics < 0 {
		return app.Config{}, o, fmt.Errorf("--refresh-metrics-interval %v: use a positive duration (GIE's default is %v), or 0 to disable scraping", o.refreshMetrics, enginemetrics.DefaultInterval)
	}
	cfg.EngineMetricsInterval = o.refreshMetrics
	if o.refreshMetrics == 0 {
		cfg.EngineMetricsInterval = -1
	}
	if cfg.Replicas, cfg.StateFile, err = o.rep.config(lm != nil); err != nil {
		return app.Config{}, o, err
	}
	if err := o.hard.apply(&cfg, o); err != nil {
		return app.Config{}, o, err
	}
	if cfg.CacheAlarm, err = o.alarm.config(o.tokenizer != "" || o.model != "" || o.tokenizerFromEngine, o.model, o.engineTimeout); err != nil {
		return app.Config{}, o, err
	}
	return cfg, o, nil
}

// parseAdapterCost reads --lora-residency-cost: FREE,FULL, two counts of at least 0.
func parseAdapterCost(s string) (picker.AdapterCost, error) {
	free, full, ok := strings.Cut(s, ",")
	a, err1 := strconv.Atoi(strings.TrimSpace(free))
	b, err2 := strconv.Atoi(strings.TrimSpace(full))
	if !ok || err1 != nil || err2 != nil || a < 0 || b < 0 || a > 1000 || b > 1000 {
		return picker.AdapterCost{}, fmt.Errorf("--lora-residency-cost %q: use FREE,FULL, two request counts 0-1000 (default %d,%d; 0,0 turns the term off)", s, picker.DefaultAdapterCost.FreeSlot, picker.DefaultAdapterCost.SlotsFull)
	}
	return picker.AdapterCost{FreeSlot: a, SlotsFull: b}, nil
}

// splitList is a comma-separated flag's items, trimmed, empty ones dropped.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("--log-level %q: use debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(o options, w io.Writer) *slog.Logger {
	lvl, _ := parseLevel(o.logLevel)
	ho := &slog.HandlerOptions{Level: lvl}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// serve runs the picker until ctx ends.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, o, err := parse(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		var tmp options
		fs := newFlagSet(&tmp, getenv)
		fs.SetOutput(stdout)
		fmt.Fprintln(stdout, "Usage: loadaware-epp [serve] --endpoints ip:port,... [flags]")
		fs.PrintDefaults()
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadaware-epp:", err)
		return 2
	}
	log := newLogger(o, stderr)
	gc, unmet := collectorPlan(o, getenv, gctune.CgroupMemoryMax())
	tuned := time.Now()
	gctune.Apply(gc)
	log.Info("Go collector: "+gc.Why, "gogc", gc.GCPercent, "memory_limit_bytes", gc.MemoryLimit, "pretouch_to_bytes", gc.Pretouch, "took", time.Since(tuned).Round(time.Millisecond))
	if unmet != "" {
		log.Warn(unmet)
	}
	for name, v := range o.unsupported {
		if *v != "" {
			log.Warn("flag accepted for GIE compatibility but not supported by this build yet; it has no effect", "flag", "--"+name, "value", *v)
		}
	}
	if err := addTokenizer(&cfg, o, getenv, log); err != nil {
		fmt.Fprintln(stderr, "loadaware-epp:", err)
		return 1
	}
	var watcher *kube.Watcher
	if o.kube.Mode() != kube.ModeOff {
		client, dyn, err := kube.NewClientsFromEnv()
		if err == nil {
			watcher, err = kube.NewWatcher(o.kube, client, dyn, log)
		}
		if err != nil {
			fmt.Fprintln(stderr, "loadaware-epp: Kubernetes discovery:", err)
			return 1
		}
	}
	a, err := app.Start(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "loadaware-epp:", err)
		return 1
	}
	discovery := make(chan error, 1)
	if watcher != nil {
		go func() { discovery <- watcher.Run(ctx, a.UpdateEndpoints) }()
	}
	select {
	case <-ctx.Done():
	case err := <-discovery:
		if err != nil && ctx.Err() == nil {
			log.Error("Kubernetes discovery stopped: the endpoint set can no longer follow the pods; restarting the picker", "err", err)
			_ = a.Close()
			return 1
		}
		<-ctx.Done()
	}
	log.Info("shutting down")
	if err := a.Close(); err != nil {
		log.Error("shutdown", "err", err)
		return 1
	}
	return 0
}

// addTokenizer resolves and loads the tokenizer the flags ask for. With none asked for,
// text and chat prompts are routed on load alone (and counted).
func addTokenizer(cfg *app.Config, o options, getenv func(string) string, log *slog.Logger) error {
	if o.tokenizer == "" && o.model == "" && !o.tokenizerFromEngine {
		log.Warn("no tokenizer configured: text and chat prompts will be routed on load alone; pass --tokenizer PATH, --model ORG/NAME or --tokenizer-from-engine")
		return nil
	}
	src, err := tokenize.Resolve(tokenize.ResolveOptions{Tokenizer: o.tokenizer, Model: o.model, FromEngine: o.tokenizerFromEngine, Getenv: getenv})
	if err != nil {
		return err
	}
	t := &picker.Tokens{}
	if src.Path != "" {
		start := time.Now()
		if t.Local, err = tokenize.Load(src.Path); err != nil {
			return fmt.Errorf("cannot load the tokenizer from %s: %v", src.Path, err)
		}
		log.Info("tokenizer loaded", "path", src.Path, "tokenizer", t.Local.String(), "took", time.Since(start).Round(time.Millisecond))
	}
	if o.tokenizerFromEngine {
		t.Engine = &tokenize.EngineClient{Timeout: o.engineTimeout}
	}
	cfg.Tokenizer = t
	cfg.TokenizerMetrics = func(reg prometheus.Registerer) error {
		m, err := tokenize.NewMetrics(reg, t.Local)
		t.Metrics = m
		return err
	}
	return nil
}

// lmcacheConfig reads the LMCache controller flags; nil when the controller is disabled.
func lmcacheConfig(o options, getenv func(string) string) (*app.LMCacheConfig, error) {
	if o.lmPull == 0 {
		return nil, nil
	}
	seed, source := lmcache.ResolveHashSeed(o.lmHashSeed, getenv)
	format, err := lmcache.ParseKeyFormat(o.lmKeyFormat)
	if err != nil {
		return nil, fmt.Errorf("--lmcache-key-format: %v", err)
	}
	if o.lmChunkSize < 1 {
		return nil, fmt.Errorf("--lmcache-chunk-size %d: use the engines' LMCACHE_CHUNK_SIZE (256 by default)", o.lmChunkSize)
	}
	keys := lmcache.KeyConfig{HashSeed: seed, ChunkSize: o.lmChunkSize, Format: format}
	if _, err := lmcache.NewHasher(keys); err != nil {
		return nil, fmt.Errorf("--lmcache-hash-seed/--lmcache-chunk-size: %v", err)
	}
	allow, err := lmcache.ParseAllowMode(o.lmAllow)
	if err != nil {
		return nil, fmt.Errorf("--lmcache-allow-from: %v", err)
	}
	addr := func(port int) string {
		if port == 0 {
			return ""
		}
		return net.JoinHostPort(o.bindAddress, strconv.Itoa(port))
	}
	return &app.LMCacheConfig{PullAddr: addr(o.lmPull), ReplyAddr: addr(o.lmReply), HeartbeatAddr: addr(o.lmHeartbeat),
		HeartbeatURL: o.lmHeartbeatURL, Keys: keys, HashSeedSource: source, Allow: allow, HeartbeatTimeout: o.lmInstanceTimeout}, nil
}

// collectorPlan is the Go collector's settings for o (gctune.Plan, pre-touched under
// --heap-pretouch), and a warning when --heap-pretouch was asked for but cannot be done.
func collectorPlan(o options, getenv func(string) string, cgroupMax int64) (gctune.Settings, string) {
	gc := gctune.Plan(getenv, cgroupMax, o.gcPercent, o.memoryLimit)
	if !o.heapPretouch {
		return gc, ""
	}
	if gc = gctune.WithPretouch(gc, getenv); gc.Pretouch == 0 {
		return gc, "--heap-pretouch asked for but not done: give the picker a memory limit of its own (--memory-limit, or a container memory limit) and leave GOGC and GOMEMLIMIT unset"
	}
	return gc, ""
}
