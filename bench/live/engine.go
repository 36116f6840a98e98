// Package live runs the benchmark against live engines. Each simulated vLLM +
// LMCache engine is the bench/sim model that virtual time uses, advanced by a
// driver goroutine against the wall clock (the model stays pure), behind a real
// HTTP server: OpenAI streaming /v1/completions and /v1/chat/completions, vLLM's
// /metrics, /tokenize and /health. Its LMCache CPU tier pushes real ZeroMQ
// frames (LMCache 0.3.9 shapes: a RegisterMsg at start, then KVAdmitMsg and
// KVEvictMsg in multipart batches of up to 50) to the picker's controller.
//
// Run starts the real picker (app.Start: ext_proc gRPC, metrics, the embedded
// LMCache controller), the engines and bench/gateway in front of them, sends
// one seed's requests open-loop through the gateway, and returns the same
// experiment.Run the analysis reads, so reports and paired comparisons work on live
// runs too.
//
// Everything listens on loopback only. Engine i listens on its own loopback IP
// (the host of experiment.Addrs: 127.0.1.<i+1>; all of 127/8 is loopback on Linux),
// because the picker maps LMCache instances to endpoints by IP.
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/tokenize"
)

// DefaultModelName is the model name the engines serve.
const DefaultModelName = "Qwen/Qwen2.5-3B-Instruct"

// EngineConfig configures one live engine.
type EngineConfig struct {
	// Model is the engine model's constants (bench/sim); ignored when From is set.
	Model sim.Config
	// From, when set, is an engine model to continue serving from (for instance one of
	// the engines of Options.WarmUp's fleet), at model time Clock. The live engine owns it from then on.
	From  *sim.Engine
	Clock time.Duration
	// IP is the loopback IP the engine listens on and registers its LMCache worker with.
	IP string
	// Listener, when set, is where the engine serves (its host must be IP); nil: a free port on IP.
	Listener net.Listener
	// InstanceID is the LMCache instance id; empty: "vllm-" + IP.
	InstanceID string
	// PullAddr is the picker's LMCache PULL address ("ip:port"); empty: the engine pushes no events.
	PullAddr string
	// Keys says how a new model's LMCache tier hashes prompts into chunk keys
	// (PYTHONHASHSEED, empty: lmcache.DefaultHashSeed; key format); its chunk size must be the
	// model's (0 takes it). A model given in From keeps the key function it was built with.
	Keys lmcache.KeyConfig
	// KVEvents, when set, makes the engine publish vLLM KV cache events for its CPU tier.
	KVEvents *KVEventsConfig
	// ModelName is the served model name; empty: DefaultModelName.
	ModelName string
	// Tokenizer encodes text and chat prompts; nil: one id per UTF-8 byte (only equality of
	// ids matters to the caches; the benchmark's workload sends token ids).
	Tokenizer *tokenize.Tokenizer
	// Logger receives errors; nil discards them.
	Logger *slog.Logger
}

// Engine is one live simulated engine. Its methods are safe for concurrent use.
type Engine struct {
	cfg     EngineConfig
	model   *sim.Engine // owned by the driver goroutine
	srv     *http.Server
	lis     net.Listener
	push    *pusher // nil without PullAddr
	kv      *kvPub  // nil without KVEvents
	log     *slog.Logger
	ingress time.Duration // the model's IngressLatency: waited between reading a request and queueing it

	epoch time.Time     // wall time of model time base
	base  time.Duration // model time at epoch

	submit  chan *job
	quit    chan struct{}
	drained chan struct{}
	nextID  atomic.Int64
	metrics atomic.Pointer[sim.Metrics]
	lat     latencies

	closeOnce sync.Once
	closeErr  error
}

// job is one request inside the engine: the driver sends one value on token per output
// token and closes it after the last one, or after setting err when the request failed.
type job struct {
	req     sim.Request
	token   chan struct{}
	err     error
	arrived time.Duration // model time the driver received it
}

// latencies are the engine-side request histograms vLLM exports, with vLLM's buckets:
// vllm:time_to_first_token_seconds (arrival to first token), vllm:request_prefill_time_seconds
// (first admission to first token), vllm:request_queue_time_seconds (arrival to first
// admission), vllm:inter_token_latency_seconds (between consecutive output tokens) and
// vllm:e2e_request_latency_seconds (arrival to last token). Written by the driver.
// computed is the sum of vllm:request_prefill_kv_computed_tokens: the prompt tokens the
// requests in prefill's count computed (neither prefix-cache nor connector hits).
type latencies struct {
	ttft, prefill, queue, itl, e2e *histogram
	computed                       *atomic.Int64
}

func newLatencies() latencies {
	return latencies{ttft: newHistogram(ttftBuckets), prefill: newHistogram(requestBuckets),
		queue: newHistogram(requestBuckets), itl: newHistogram(itlBuckets), e2e: newHistogram(requestBuckets),
		computed: new(atomic.Int64)}
}

// StartEngine starts an engine and serves it until Close. With a PullAddr, its LMCache
// worker registers at once (a RegisterMsg pushed before any chunk event).
func StartEngine(cfg EngineConfig) (_ *Engine, err error) {
	if cfg.IP == "" {
		return nil, errors.New("live: engine has no IP: give each engine its own loopback IP (127.0.1.1, 127.0.1.2, ...)")
	}
	modelCfg := cfg.Model
	if cfg.From != nil {
		modelCfg = cfg.From.Config()
	}
	if cfg.Keys.HashSeed == "" {
		cfg.Keys.HashSeed = lmcache.DefaultHashSeed
	}
	if cfg.Keys.ChunkSize == 0 {
		cfg.Keys.ChunkSize = modelCfg.ChunkSize
	}
	if cfg.Keys.ChunkSize != modelCfg.ChunkSize {
		return nil, fmt.Errorf("live: LMCache chunk size %d differs from the model's %d: give one value", cfg.Keys.ChunkSize, modelCfg.ChunkSize)
	}
	keys, err := lmcache.NewHasher(cfg.Keys)
	if err != nil {
		return nil, fmt.Errorf("live: LMCache keys: %w", err)
	}
	model := cfg.From
	if model == nil {
		if model, err = sim.New(cfg.Model, keys.ChunkKeys); err != nil {
			return nil, fmt.Errorf("live: engine model: %w", err)
		}
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = "vllm-" + cfg.IP
	}
	if cfg.ModelName == "" {
		cfg.ModelName = DefaultModelName
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg: cfg, model: model, log: log, ingress: modelCfg.IngressLatency, lat: newLatencies(),
		base: cfg.Clock, submit: make(chan *job), quit: make(chan struct{}), drained: make(chan struct{}),
	}
	e.lis = cfg.Listener
	if e.lis == nil {
		if e.lis, err = listenOn(cfg.IP); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			_ = e.lis.Close()
			if e.push != nil {
				_ = e.push.close()
			}
		}
	}()
	if host, _, _ := net.SplitHostPort(e.lis.Addr().String()); host != cfg.IP {
		return nil, fmt.Errorf("live: the listener is on %s, not on the engine's IP %s", host, cfg.IP)
	}
	if cfg.PullAddr != "" {
		if e.push, err = startPusher(cfg.IP, cfg.PullAddr, log); err != nil {
			return nil, err
		}
		url := net.JoinHostPort(cfg.IP, "30081")
		if err := e.push.enqueue(lmcache.RegisterMsg{InstanceID: cfg.InstanceID, WorkerID: 0, IP: cfg.IP, Port: 8001, DistributedURL: &url}); err != nil {
			return nil, err
		}
	}
	if cfg.KVEvents != nil {
		if e.kv, err = startKVPub(cfg.IP, *cfg.KVEvents, keys.ChunkKeys, modelCfg.ChunkSize); err != nil {
			return nil, err
		}
	}
	m := model.Metrics()
	e.metrics.Store(&m)
	e.epoch = time.Now()
	go e.drive()
	e.srv = &http.Server{Handler: e.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(e.lis) }()
	return e, nil
}

// listenOn listens on a free port of the loopback ip.
func listenOn(ip string) (net.Listener, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, fmt.Errorf("live: listen on %s: %w (all of 127/8 is loopback on Linux; elsewhere add the address to the loopback interface)", ip, err)
	}
	return l, nil
}

// Addr is the engine's "ip:port".
func (e *Engine) Addr() string { return e.lis.Addr().String() }

// InstanceID is the engine's LMCache instance id.
func (e *Engine) InstanceID() string { return e.cfg.InstanceID }

// Metrics returns the model's gauges and totals as of its last step or arrival.
func (e *Engine) Metrics() sim.Metrics { return *e.metrics.Load() }

// Emitted is how many LMCache messages (the registration, then every chunk admit and
// evict) the engine has produced; Pushed how many of them its ZeroMQ socket has accepted.
// Both are 0 without a PullAddr.
func (e *Engine) Emitted() int64 {
	if e.push == nil {
		return 0
	}
	return e.push.emitted.Load()
}

// Pushed is how many messages the engine's ZeroMQ socket has accepted (see Emitted).
func (e *Engine) Pushed() int64 {
	if e.push == nil {
		return 0
	}
	return e.push.pushed.Load()
}

// Close stops the server at once (interrupting running requests), the driver and the
// ZeroMQ socket. It is idempotent.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		err := e.srv.Close()
		close(e.quit)
		<-e.drained
		if e.push != nil {
			err = errors.Join(err, e.push.close())
		}
		err = errors.Join(err, e.kv.close())
		e.closeErr = err
	})
	return e.closeErr
}

// modelNow is the model time corresponding to the wall clock.
func (e *Engine) modelNow() time.Duration { return e.base + time.Since(e.epoch) }

// wallUntil is how long the wall clock takes to reach model time t.
func (e *Engine) wallUntil(t time.Duration) time.Duration { return time.Until(e.epoch.Add(t - e.base)) }

// drive owns the model: it queues arriving requests and runs one step after another, each
// ending when the wall clock reaches the step's model end time. A step that follows another
// starts at the previous step's end, so the model's pace does not drift with timer lateness;
// a step after an idle period starts at the arrival's time.
func (e *Engine) drive() {
	defer close(e.drained)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	jobs := map[*sim.Request]*job{}
	busy := false
	var last time.Duration // end of the last step
	start := func(at time.Duration) {
		if end, ok := e.model.Start(at); ok {
			busy = true
			timer.Reset(e.wallUntil(end))
		}
	}
	for {
		select {
		case <-e.quit:
			timer.Stop()
			for _, j := range jobs {
				j.err = errors.New("the engine shut down")
				close(j.token)
			}
			return
		case j := <-e.submit:
			if err := e.model.Add(&j.req); err != nil {
				j.err = err
				close(j.token)
				continue
			}
			j.arrived = e.modelNow()
			jobs[&j.req] = j
			e.kv.learn(j.req.Tokens)
			if !busy {
				start(max(last, e.modelNow()))
			}
		case <-timer.C:
			out := e.model.Finish()
			busy, last = false, out.At
			// Publish the step's gauges before any client can see its tokens or
			// the end of its stream, so /metrics never lags a finished request.
			m := e.model.Metrics()
			e.metrics.Store(&m)
			for _, ev := range out.KV {
				var msg lmcache.Message = lmcache.KVAdmitMsg{InstanceID: e.cfg.InstanceID, Key: ev.Key, Location: experiment.Location}
				if !ev.Admit {
					msg = lmcache.KVEvictMsg{InstanceID: e.cfg.InstanceID, Key: ev.Key, Location: experiment.Location}
				}
				if e.push != nil {
					if err := e.push.enqueue(msg); err != nil {
						e.log.Error("live: LMCache event not pushed: the picker's index will miss it", "engine", e.Addr(), "err", err)
					}
				}
			}
			e.kv.publish(out.KV, e.log)
			for _, r := range out.Tokens {
				if n := len(r.TokenTimes); n == 1 { // its first token
					e.lat.ttft.observe(r.TokenTimes[0] - jobs[r].arrived)
					e.lat.prefill.observe(r.TokenTimes[0] - r.AdmittedAt)
					e.lat.computed.Add(int64(len(r.Tokens) - r.CachedTokens - r.LoadedTokens))
					e.lat.queue.observe(r.AdmittedAt - jobs[r].arrived)
				} else {
					e.lat.itl.observe(r.TokenTimes[n-1] - r.TokenTimes[n-2])
				}
				select {
				case jobs[r].token <- struct{}{}: // buffered for MaxTokens tokens, the most the model produces
				default:
					e.log.Error("live: the model produced more tokens than the request asked for; token dropped", "request", r.ID)
				}
			}
			for _, r := range out.Finished {
				e.lat.e2e.observe(r.TokenTimes[len(r.TokenTimes)-1] - jobs[r].arrived)
				close(jobs[r].token)
				delete(jobs, r)
			}
			start(last)
		}
		m := e.model.Metrics()
		e.metrics.Store(&m)
	}
}

// enqueue hands a request to the driver; it fails when ctx ends or the engine closes first.
func (e *Engine) enqueue(ctx context.Context, j *job) error {
	select {
	case e.submit <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.quit:
		return errors.New("the engine shut down")
	}
}
