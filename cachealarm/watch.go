package cachealarm

import (
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Why an endpoint is in alarm (label "reason" of loadaware_cache_signal_dead_alarms_total).
const (
	// ReasonSilent: the cache source received nothing from the endpoint for a window while
	// prompts kept being routed to it (its KV event stream or LMCache worker went quiet,
	// or never reached the picker).
	ReasonSilent = "silent"
	// ReasonUncredited: the source received the endpoint's cache events but credited them
	// to no endpoint (LMCache: no active instance registered with the endpoint's IP).
	ReasonUncredited = "uncredited"
	// ReasonTokenizer: the engine's /tokenize gave other ids than the picker for the
	// parity sample, so its cached blocks never match the picker's lookups.
	ReasonTokenizer = "tokenizer"
)

// Reasons lists every reason, in the order a dashboard shows them.
var Reasons = []string{ReasonSilent, ReasonUncredited, ReasonTokenizer}

// Defaults of Config.
const (
	DefaultWindow     = 2 * time.Minute
	DefaultMinPrompts = 8
)

// Config configures a Watch. Zero fields take the defaults.
type Config struct {
	// Window is how long an endpoint may go without a credited cache signal while
	// prompts are routed to it; each endpoint in alarm is logged once per Window.
	Window time.Duration
	// MinPrompts is how many prompts must have been routed to the endpoint since its last
	// signal before silence counts (an idle endpoint sends nothing and is not in alarm).
	MinPrompts int64
	// Logger receives one warning per endpoint in alarm per window; nil discards it.
	Logger *slog.Logger
	// Registerer receives the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
}

// Watch is the alarm's state. Routed, Signal, Uncredited and Parity are safe for
// concurrent use and take no lock; Tick and States serialise among themselves.
type Watch struct {
	cfg    Config
	log    *slog.Logger
	gauge  *prometheus.GaugeVec
	alarms *prometheus.CounterVec

	prompts sync.Map // endpoint -> *atomic.Int64
	signals sync.Map // IP -> *ipSignals
	parity  sync.Map // endpoint -> *Sample (the last one)

	mu    sync.Mutex
	state map[string]*endpointState
}

type ipSignals struct{ credited, uncredited atomic.Int64 }

// Sample is one tokenizer parity sample of an endpoint.
type Sample struct {
	OK     bool
	Detail string // what differed (or why the engine could not be asked), empty when OK
}

// endpointState is what Tick remembers of an endpoint between ticks.
type endpointState struct {
	lastSignal           time.Time // last tick that saw a credited signal (first tick when none yet)
	promptsAtSignal      int64
	credited, uncredited int64 // the IP's counters at the last tick
	uncreditedSeen       bool  // uncredited signals since the last credited one
	reason               string
	since, logged        time.Time
}

// New returns a Watch that has seen nothing.
func New(cfg Config) (*Watch, error) {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MinPrompts <= 0 {
		cfg.MinPrompts = DefaultMinPrompts
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watch{cfg: cfg, log: log, state: map[string]*endpointState{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadaware_cache_signal_dead",
			Help: "1 while an endpoint receives routed prompts but its cache source sent or credited nothing of it for a window, or its tokenizer differs (loadaware_cache_signal_dead_alarms_total says why).",
		}, []string{"endpoint"}),
		alarms: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_cache_signal_dead_alarms_total",
			Help: "Cache-signal-dead alarms logged (one per endpoint in alarm per window), by reason: silent, uncredited, tokenizer.",
		}, []string{"reason"}),
	}
	for _, r := range Reasons {
		w.alarms.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{w.gauge, w.alarms} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("cachealarm: register metrics: %w", err)
			}
		}
	}
	return w, nil
}

// Window is the configured window.
func (w *Watch) Window() time.Duration { return w.cfg.Window }

// Routed records one prompt routed to endpoint ("ip:port"). Its signature makes a Watch a
// picker observer; the token ids are not read.
func (w *Watch) Routed(endpoint string, _ []uint32) {
	v, ok := w.prompts.Load(endpoint)
	if !ok {
		v, _ = w.prompts.LoadOrStore(endpoint, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// Signal records one cache event received from endpoint ("ip" or "ip:port") and credited
// to it. Signals are kept per IP: both cache sources tell engines apart by IP.
func (w *Watch) Signal(endpoint string) { w.ip(endpoint).credited.Add(1) }

// Uncredited records one cache event received from endpoint that its source credits to
// no endpoint.
func (w *Watch) Uncredited(endpoint string) { w.ip(endpoint).uncredited.Add(1) }

// Parity records endpoint's latest tokenizer parity sample.
func (w *Watch) Parity(endpoint string, s Sample) { w.parity.Store(endpoint, &s) }

func (w *Watch) ip(endpoint string) *ipSignals {
	key := HostOf(endpoint)
	v, ok := w.signals.Load(key)
	if !ok {
		v, _ = w.signals.LoadOrStore(key, new(ipSignals))
	}
	return v.(*ipSignals)
}

// HostOf is the host of "host:port", or s itself when it has no port.
func HostOf(s string) string {
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// Alarm is one endpoint in alarm at a tick.
type Alarm struct {
	Endpoint string
	Reason   string
	Since    time.Time // when it went into alarm
	Prompts  int64     // routed to it since its last credited signal
	Logged   bool      // this tick logged it (and counted it)
}

// Tick judges endpoints (the fleet, "ip:port") at now: an endpoint that has had at least
// MinPrompts prompts routed to it since its last credited signal, and no credited signal
// for Window, is in alarm (uncredited when its signals came but were not credited, else
// silent); an endpoint whose last parity sample differed is in alarm at once. Each
// endpoint in alarm is logged and counted when it goes into alarm and again once per
// Window while it stays. Endpoints not listed are forgotten. now must not go back.
// Tick returns the endpoints in alarm, ordered by endpoint.
func (w *Watch) Tick(now time.Time, endpoints []string) []Alarm {
	w.mu.Lock()
	defer w.mu.Unlock()
	keep := make(map[string]bool, len(endpoints))
	var out []Alarm
	for _, ep := range endpoints {
		keep[ep] = true
		prompts := w.promptCount(ep)
		sig := w.ip(ep)
		c, u := sig.credited.Load(), sig.uncredited.Load()
		st := w.state[ep]
		if st == nil {
			st = &endpointState{lastSignal: now, promptsAtSignal: prompts, credited: c, uncredited: u}
			w.state[ep] = st
		}
		if c != st.credited {
			st.lastSignal, st.promptsAtSignal, st.uncreditedSeen = now, prompts, false
		}
		if u != st.uncredited {
			st.uncreditedSeen = true
		}
		st.credited, st.uncredited = c, u
		reason := ""
		if v, ok := w.parity.Load(ep); ok && !v.(*Sample).OK {
			reason = ReasonTokenizer
		} else if now.Sub(st.lastSignal) >= w.cfg.Window && prompts-st.promptsAtSignal >= w.cfg.MinPrompts {
			reason = ReasonSilent
			if st.uncreditedSeen {
				reason = ReasonUncredited
			}
		}
		if reason == "" {
			if st.reason != "" {
				w.log.Info("cache signal back: the endpoint's cache source credits it again", "endpoint", ep, "was", st.reason)
				w.gauge.WithLabelValues(ep).Set(0)
			}
			st.reason = ""
			continue
		}
		a := Alarm{Endpoint: ep, Reason: reason, Prompts: prompts - st.promptsAtSignal}
		if st.reason != reason {
			st.since = now
		}
		if st.reason != reason || now.Sub(st.logged) >= w.cfg.Window {
			st.logged, a.Logged = now, true
			w.alarms.WithLabelValues(reason).Inc()
			w.logAlarm(ep, reason, a.Prompts, now.Sub(st.lastSignal))
		}
		st.reason, a.Since = reason, st.since
		w.gauge.WithLabelValues(ep).Set(1)
		out = append(out, a)
	}
	for ep := range w.state {
		if !keep[ep] {
			delete(w.state, ep)
			w.prompts.Delete(ep)
			w.parity.Delete(ep)
			w.gauge.DeleteLabelValues(ep)
		}
	}
	hosts := make(map[string]bool, len(endpoints))
	for _, ep := range endpoints {
		hosts[HostOf(ep)] = true
	}
	w.signals.Range(func(k, _ any) bool {
		if !hosts[k.(string)] {
			w.signals.Delete(k) // a peer outside the fleet (--lmcache-allow-from any)
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Endpoint < out[j].Endpoint })
	return out
}

func (w *Watch) promptCount(ep string) int64 {
	if v, ok := w.prompts.Load(ep); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func (w *Watch) logAlarm(ep, reason string, prompts int64, silent time.Duration) {
	switch reason {
	case ReasonTokenizer:
		detail := ""
		if v, ok := w.parity.Load(ep); ok {
			detail = v.(*Sample).Detail
		}
		w.log.Warn("cache signal dead: the engine tokenizes the parity sample differently from the picker, so its cached blocks never match; load the served model's tokenizer (--tokenizer or --model) and chat template (run loadaware-epp check)",
			"endpoint", ep, "reason", reason, "detail", detail)
	case ReasonUncredited:
		w.log.Warn("cache signal dead: the endpoint's cache events arrive but are credited to no endpoint; its LMCache instance must register with the endpoint's IP (set the worker's ip / LMCACHE_LOOKUP_URL host to the pod IP) (run loadaware-epp check)",
			"endpoint", ep, "reason", reason, "prompts_routed", prompts, "for", silent.Round(time.Second))
	default:
		w.log.Warn("cache signal dead: prompts are routed to the endpoint but its cache source has sent nothing for a window; check the engine's KV events (--kv-events-config) or LMCache controller URL, and that the picker's ports are reachable from it (run loadaware-epp check)",
			"endpoint", ep, "reason", reason, "prompts_routed", prompts, "for", silent.Round(time.Second))
	}
}

// State is one endpoint as the last Tick judged it (for /admin/state).
type State struct {
	Endpoint   string    `json:"endpoint"`
	Reason     string    `json:"reason,omitempty"` // empty: not in alarm
	Since      time.Time `json:"since,omitzero"`
	LastSignal time.Time `json:"last_signal"` // the last tick that saw a credited signal (or the first tick)
	Signals    int64     `json:"signals"`     // credited cache events of its IP so far
	Uncredited int64     `json:"uncredited"`  // uncredited ones
	Prompts    int64     `json:"prompts"`     // routed to it so far
	Parity     *Sample   `json:"parity,omitempty"`
}

// States returns every endpoint the last Tick judged, ordered by endpoint.
func (w *Watch) States() []State {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]State, 0, len(w.state))
	for ep, st := range w.state {
		s := State{Endpoint: ep, Reason: st.reason, LastSignal: st.lastSignal, Signals: st.credited,
			Uncredited: st.uncredited, Prompts: w.promptCount(ep)}
		if st.reason != "" {
			s.Since = st.since
		}
		if v, ok := w.parity.Load(ep); ok {
			p := *v.(*Sample)
			s.Parity = &p
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Endpoint < out[j].Endpoint })
	return out
}
