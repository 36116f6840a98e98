// Package simpleengine is a small OpenAI-compatible streaming server that stands in for a vLLM
// engine in the gateway's tests and in the demo. It is not the calibrated simulator (bench/sim):
// it models only what makes routing visible.
//
// It serves POST /v1/completions and /v1/chat/completions (streaming as server-sent events
// "data: {...}\n\n" ending with "data: [DONE]\n\n", or one JSON object), GET /health, and
// GET /metrics with vllm:num_requests_running and vllm:num_requests_waiting. A request emits
// max_tokens chunks: the first after the time to first token (TTFT), the others one inter-token
// delay (ITL) apart. Both delays grow with the requests running at that moment:
//
//	delay = base * (1 + Slowdown * (running - 1))
//
// so a busy engine is visibly slower. A prompt whose first PrefixBytes bytes the engine saw among
// its last PrefixEntries distinct prefixes is a prefix-cache hit and uses HitTTFT as base.
// MaxRunning requests run at once; the others wait in FIFO order of arrival at the semaphore.
// All waiting goes through Config.Sleep, so tests can run without real time.
package simpleengine

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config sets an engine's behaviour. Zero fields take the defaults named on each.
type Config struct {
	Model            string        // served model name; default "simple"
	TTFT             time.Duration // time to first token of a cold prompt on an idle engine; default 40 ms
	HitTTFT          time.Duration // the same for a prefix-cache hit; default TTFT/4
	ITL              time.Duration // inter-token delay on an idle engine; default 5 ms
	Slowdown         float64       // added fraction of delay per other running request; default 0.25; negative: none
	MaxRunning       int           // requests generating at once; default 64
	PrefixBytes      int           // prompt bytes that make the prefix-cache key; default 256
	PrefixEntries    int           // distinct prefixes remembered (LRU); default 64
	DefaultMaxTokens int           // chunks when the request has no max_tokens; default 16
	MaxBodyBytes     int64         // larger request bodies get 413; default 16 MiB
	// Sleep waits d or until ctx ends (then it returns ctx's error); default a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now stamps the "created" field; default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Model == "" {
		c.Model = "simple"
	}
	if c.TTFT == 0 {
		c.TTFT = 40 * time.Millisecond
	}
	if c.HitTTFT == 0 {
		c.HitTTFT = c.TTFT / 4
	}
	if c.ITL == 0 {
		c.ITL = 5 * time.Millisecond
	}
	switch {
	case c.Slowdown == 0:
		c.Slowdown = 0.25
	case c.Slowdown < 0:
		c.Slowdown = 0
	}
	if c.MaxRunning <= 0 {
		c.MaxRunning = 64
	}
	if c.PrefixBytes <= 0 {
		c.PrefixBytes = 256
	}
	if c.PrefixEntries <= 0 {
		c.PrefixEntries = 64
	}
	if c.DefaultMaxTokens <= 0 {
		c.DefaultMaxTokens = 16
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 16 << 20
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats are an engine's counters since it started.
type Stats struct {
	Requests    int64 // generation requests admitted (parsed and started)
	PrefixHits  int64 // of which prefix-cache hits
	TokensSent  int64 // chunks of generated text sent
	MaxRunning  int64 // the most requests seen running at once
	Interrupted int64 // requests whose client left before the end
}

// Engine is the HTTP handler of one simulated engine. It is safe for concurrent use.
type Engine struct {
	cfg     Config
	slots   chan struct{}
	running atomic.Int64
	waiting atomic.Int64
	nextID  atomic.Uint64

	requests, hits, tokens, peak, interrupted atomic.Int64

	mu       sync.Mutex
	prefixes *list.List               // most recent first; values are keys
	index    map[string]*list.Element // key -> element

	mux *http.ServeMux
}

// New returns an engine with cfg (defaults filled in).
func New(cfg Config) *Engine {
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg:      cfg,
		slots:    make(chan struct{}, cfg.MaxRunning),
		prefixes: list.New(),
		index:    map[string]*list.Element{},
		mux:      http.NewServeMux(),
	}
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": cfg.Model}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_running",
			Help: "Number of requests in model execution batches.", ConstLabels: labels},
			func() float64 { return float64(e.running.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting",
			Help: "Number of requests waiting to be processed.", ConstLabels: labels},
			func() float64 { return float64(e.waiting.Load()) }),
	)
	e.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { e.generate(w, r, false) })
	e.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { e.generate(w, r, true) })
	e.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	e.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return e
}

// ServeHTTP implements http.Handler.
func (e *Engine) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.mux.ServeHTTP(w, r) }

// Running is the number of requests generating now; Waiting the number waiting for a slot.
func (e *Engine) Running() int { return int(e.running.Load()) }

// Waiting is the number of requests waiting for a slot.
func (e *Engine) Waiting() int { return int(e.waiting.Load()) }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{Requests: e.requests.Load(), PrefixHits: e.hits.Load(), TokensSent: e.tokens.Load(),
		MaxRunning: e.peak.Load(), Interrupted: e.interrupted.Load()}
}

// delay is base stretched by the other running requests.
func (e *Engine) delay(base time.Duration, running int64) time.Duration {
	if running < 1 {
		running = 1
	}
	return time.Duration(float64(base) * (1 + e.cfg.Slowdown*float64(running-1)))
}

// seen reports whether prompt's prefix key is among the remembered ones, and remembers it.
func (e *Engine) seen(prompt string) bool {
	key := prompt
	if len(key) > e.cfg.PrefixBytes {
		key = key[:e.cfg.PrefixBytes]
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.index[key]; ok {
		e.prefixes.MoveToFront(el)
		return true
	}
	e.index[key] = e.prefixes.PushFront(key)
	if e.prefixes.Len() > e.cfg.PrefixEntries {
		old := e.prefixes.Back()
		e.prefixes.Remove(old)
		delete(e.index, old.Value.(string))
	}
	return false
}

func (e *Engine) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, e.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, "read the body: "+err.Error())
		return
	}
	req, err := parseRequest(body, chat, e.cfg.DefaultMaxTokens)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	e.waiting.Add(1)
	select {
	case e.slots <- struct{}{}:
		e.waiting.Add(-1)
	case <-ctx.Done():
		e.waiting.Add(-1)
		e.interrupted.Add(1)
		return
	}
	running := e.running.Add(1)
	defer func() {
		e.running.Add(-1)
		<-e.slots
	}()
	for p := e.peak.Load(); running > p && !e.peak.CompareAndSwap(p, running); p = e.peak.Load() {
	}
	e.requests.Add(1)
	base := e.cfg.TTFT
	if e.seen(req.prompt) {
		e.hits.Add(1)
		base = e.cfg.HitTTFT
	}
	out := newWriter(w, req, e.cfg.Model, fmt.Sprintf("%d", e.nextID.Add(1)), e.cfg.Now().Unix())
	if err := e.cfg.Sleep(ctx, e.delay(base, running)); err != nil {
		e.interrupted.Add(1)
		return
	}
	for i := range req.maxTokens {
		if i > 0 {
			if err := e.cfg.Sleep(ctx, e.delay(e.cfg.ITL, e.running.Load())); err != nil {
				e.interrupted.Add(1)
				return
			}
		}
		if err := out.token(i); err != nil {
			e.interrupted.Add(1)
			return
		}
		e.tokens.Add(1)
	}
	_ = out.finish()
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": strings.ReplaceAll(http.StatusText(code), " ", "") + "Error", "code": code,
	}})
}

// Server is an Engine listening on a loopback port.
type Server struct {
	*Engine
	srv *http.Server
	lis net.Listener
}

// Start serves a new engine on 127.0.0.1 at a free port until Close.
func Start(cfg Config) (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("simpleengine: listen on a loopback port: %w", err)
	}
	s := &Server{Engine: New(cfg), lis: lis}
	s.srv = &http.Server{Handler: s.Engine, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn)}
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// Addr is the engine's "127.0.0.1:port".
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close stops the server at once, interrupting running requests.
func (s *Server) Close() error { return s.srv.Close() }
