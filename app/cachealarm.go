package app

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadaware/loadaware-epp/cachealarm"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/tokenize"
	"github.com/prometheus/client_golang/prometheus"
)

// CacheAlarmConfig configures the cache-signal-dead alarm (package cachealarm). Zero
// fields take the defaults.
type CacheAlarmConfig struct {
	Window     time.Duration // an endpoint's longest silence under routed prompts; 0: cachealarm.DefaultWindow
	MinPrompts int64         // prompts routed since its last signal before silence counts; 0: cachealarm.DefaultMinPrompts
	// Every is how often the endpoints are judged; 0: a tenth of Window (at least 1 s);
	// negative: never by the service (the caller calls TickCacheAlarm with its own clock).
	Every time.Duration
	// ParityInterval, when positive, samples every endpoint's /tokenize against the
	// picker's tokenizer this often (needs a tokenizer); 0: off.
	ParityInterval time.Duration
	ParityModel    string // "model" sent to the engines' /tokenize; empty: left out
	ParityTimeout  time.Duration
}

// observed is what the service keeps of its cache sources and tokenizer for the alarm and
// for /admin/state and /admin/lookup.
type observed struct {
	view      picker.CacheView // nil: no cache view
	tokenizer picker.Tokenizer // nil: none
	credited  atomic.Pointer[map[string]bool]
	streams   sync.Map // endpoint -> *streamSeen
	parity    *prometheus.CounterVec
}

// streamSeen is one endpoint's KV event stream as received.
type streamSeen struct {
	seq, batches, at atomic.Int64 // at: Unix nanoseconds of the last batch
}

// newCacheAlarm creates the alarm when configured; the service's observation of its
// cache sources (for /admin/state) exists either way.
func (a *App) newCacheAlarm(c *CacheAlarmConfig, tokenizer bool, reg prometheus.Registerer) error {
	a.obs = &observed{}
	if c == nil {
		return nil
	}
	if c.ParityInterval > 0 && !tokenizer {
		return fmt.Errorf("the tokenizer parity sample needs the picker's tokenizer: pass --tokenizer, --model or --tokenizer-from-engine, or set --tokenizer-parity-interval 0")
	}
	w, err := cachealarm.New(cachealarm.Config{Window: c.Window, MinPrompts: c.MinPrompts, Logger: a.log, Registerer: reg})
	if err != nil {
		return err
	}
	a.CacheAlarm = w
	a.log.Info("cache-signal alarm on", "window", w.Window().String(), "tokenizer_parity_interval", c.ParityInterval.String())
	if c.ParityInterval > 0 {
		a.obs.parity = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_tokenizer_parity_samples_total",
			Help: "Tokenizer parity samples against the engines' /tokenize (--tokenizer-parity-interval), by outcome: equal, differs, error (the engine could not be asked).",
		}, []string{"outcome"})
		for _, o := range []string{"equal", "differs", "error"} {
			a.obs.parity.WithLabelValues(o)
		}
		if err := reg.Register(a.obs.parity); err != nil {
			return err
		}
	}
	return nil
}

// observer is the picker's observer: the configured one and the alarm's.
func (a *App) observer(o picker.Observer) picker.Observer {
	if a.CacheAlarm == nil {
		return o
	}
	if o == nil {
		return a.CacheAlarm
	}
	return observers{o, a.CacheAlarm}
}

type observers []picker.Observer

func (os observers) Routed(endpoint string, tokens []uint32) {
	for _, o := range os {
		o.Routed(endpoint, tokens)
	}
}

// lmcacheIngest wraps the LMCache controller's ingestion to give the alarm a signal for
// each message batch that reports cache contents.
func (a *App) lmcacheIngest(next lmcache.IngestFunc) lmcache.IngestFunc {
	if a.CacheAlarm == nil {
		return next
	}
	return func(peer string, frames [][]byte, apply func() bool) {
		reports := cachealarm.LMCacheReportsCache(frames)
		if next != nil {
			next(peer, frames, apply)
		} else {
			apply()
		}
		if !reports {
			return
		}
		if c := a.obs.credited.Load(); c != nil && (*c)[cachealarm.HostOf(peer)] {
			a.CacheAlarm.Signal(peer)
		} else {
			a.CacheAlarm.Uncredited(peer)
		}
	}
}

// onKVBatch is the KV events subscriber's hook: one batch received from endpoint.
func (a *App) onKVBatch(endpoint string, seq int64) {
	v, ok := a.obs.streams.Load(endpoint)
	if !ok {
		v, _ = a.obs.streams.LoadOrStore(endpoint, new(streamSeen))
	}
	s := v.(*streamSeen)
	s.seq.Store(seq)
	s.batches.Add(1)
	s.at.Store(time.Now().UnixNano())
	if a.CacheAlarm != nil {
		a.CacheAlarm.Signal(endpoint)
	}
}

// TickCacheAlarm judges every endpoint at now (see cachealarm.Watch.Tick); the service
// calls it every CacheAlarmConfig.Every. Without the alarm it returns nil.
func (a *App) TickCacheAlarm(now time.Time) []cachealarm.Alarm {
	if a.CacheAlarm == nil {
		return nil
	}
	if a.LMCacheIndex != nil {
		c := map[string]bool{}
		for _, in := range a.LMCacheIndex.Instances() {
			if in.State == lmcache.StateActive {
				c[in.IP] = true
			}
		}
		a.obs.credited.Store(&c)
	}
	return a.CacheAlarm.Tick(now, a.Fleet.Endpoints())
}

// runCacheAlarm ticks the alarm and samples tokenizer parity until ctx ends.
func (a *App) runCacheAlarm(ctx context.Context, c CacheAlarmConfig) {
	every := c.Every
	if every == 0 {
		every = max(a.CacheAlarm.Window()/10, time.Second)
	}
	var tick, sample <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	if c.ParityInterval > 0 {
		t := time.NewTicker(c.ParityInterval)
		defer t.Stop()
		sample = t.C
	}
	for {
		select {
		case now := <-tick:
			a.TickCacheAlarm(now)
		case <-sample:
			a.SampleParity(ctx, c.ParityModel, c.ParityTimeout)
		case <-ctx.Done():
			return
		}
	}
}

// SampleParity asks every endpoint's /tokenize for the parity sample's ids (a text
// prompt and a chat) and feeds the comparison with the picker's to the alarm. An engine
// that cannot be asked keeps its last sample.
func (a *App) SampleParity(ctx context.Context, model string, timeout time.Duration) {
	if a.CacheAlarm == nil || a.obs.tokenizer == nil {
		return
	}
	eng := tokenize.EngineClient{Timeout: timeout}
	chat := cachealarm.ParityChat(model)
	for _, ep := range a.Fleet.Endpoints() {
		s, err := a.parityOf(ctx, &eng, ep, model, chat)
		outcome := "equal"
		switch {
		case err != nil:
			outcome = "error"
			a.log.Debug("tokenizer parity sample failed", "endpoint", ep, "err", err)
		case !s.OK:
			outcome = "differs"
		}
		if a.obs.parity != nil {
			a.obs.parity.WithLabelValues(outcome).Inc()
		}
		if err == nil {
			a.CacheAlarm.Parity(ep, s)
		}
	}
}

func (a *App) parityOf(ctx context.Context, eng *tokenize.EngineClient, ep, model string, chat []byte) (cachealarm.Sample, error) {
	eps := []string{ep}
	mine, err := a.obs.tokenizer.Tokenize(ctx, picker.Request{Path: "/v1/completions", Model: model, Prompt: cachealarm.ParityText}, eps)
	if err != nil {
		return cachealarm.Sample{}, err
	}
	theirs, err := eng.TokenizePrompt(ctx, ep, model, cachealarm.ParityText)
	if err != nil {
		return cachealarm.Sample{}, err
	}
	if s := cachealarm.Compare("text", mine, theirs); !s.OK {
		return s, nil
	}
	if mine, err = a.obs.tokenizer.Tokenize(ctx, picker.Request{Path: "/v1/chat/completions", Model: model, ChatBody: chat}, eps); err != nil {
		return cachealarm.Sample{}, err
	}
	if theirs, err = eng.TokenizeChat(ctx, ep, chat); err != nil {
		return cachealarm.Sample{}, err
	}
	return cachealarm.Compare("chat", mine, theirs), nil
}
