package lmcache

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// MissConfig configures a MissDetector. Zero fields take the defaults in brackets.
type MissConfig struct {
	// Keys is what the picker hashes with, named in the warning (optional).
	Keys KeyConfig
	// RecentKeys is how many chunk keys of sent prompts are remembered per endpoint [4096].
	RecentKeys int
	// MinAdmits is how many admits without a match an endpoint must report before the
	// warning [200].
	MinAdmits int
	// MinPrompts is how many prompts must have been sent to the endpoint since its last
	// match before the warning [8].
	MinPrompts int
	// MaxEndpoints bounds the endpoints tracked; prompts to further ones are not tracked [1024].
	MaxEndpoints int
	// Logger receives the warning; nil discards it.
	Logger *slog.Logger
	// Registerer receives the detector's metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
}

// MissDetector finds the silent failure where engines store chunks but none of them is
// ever a chunk of a prompt this picker sent: the engines and the picker hash differently,
// so every lookup misses and cache-aware routing quietly degrades to load balancing.
//
// The picker calls Sent after each decision with the endpoint's IP and the prompt's chunk
// keys; the Index calls Admitted for every admit. When an endpoint keeps admitting
// (MinAdmits) while prompts keep being sent to it (MinPrompts) and no admitted key is one
// of the remembered ones, the detector logs one warning naming the likely causes and sets
// loadaware_lmcache_silent_miss{ip} to 1; the first match clears it. Safe for concurrent use.
type MissDetector struct {
	cfg      MissConfig
	log      *slog.Logger
	gauge    *prometheus.GaugeVec
	warnings prometheus.Counter

	mu        sync.Mutex
	endpoints map[string]*missState
}

type missState struct {
	ring      []int64
	pos       int
	set       map[int64]int32 // key -> occurrences in ring
	prompts   int             // sent since the last match
	admits    int             // admitted since the last match
	suspected bool
}

// NewMissDetector returns a detector with no history.
func NewMissDetector(cfg MissConfig) (*MissDetector, error) {
	if cfg.RecentKeys <= 0 {
		cfg.RecentKeys = 4096
	}
	if cfg.MinAdmits <= 0 {
		cfg.MinAdmits = 200
	}
	if cfg.MinPrompts <= 0 {
		cfg.MinPrompts = 8
	}
	if cfg.MaxEndpoints <= 0 {
		cfg.MaxEndpoints = 1024
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &MissDetector{
		cfg: cfg,
		log: log,
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadaware_lmcache_silent_miss",
			Help: "1 while an endpoint stores chunks but none matches the chunk keys of prompts sent to it (hash seed, tokenizer, chunk size or key format differ).",
		}, []string{"ip"}),
		warnings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_silent_miss_warnings_total",
			Help: "Silent-miss warnings logged.",
		}),
		endpoints: map[string]*missState{},
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{d.gauge, d.warnings} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("lmcache: register miss detector metrics: %w", err)
			}
		}
	}
	return d, nil
}

// Sent records that a prompt with these chunk keys was routed to ip ("ip" or "ip:port").
func (d *MissDetector) Sent(ip string, keys []int64) {
	if len(keys) == 0 {
		return
	}
	ip = canonicalIP(ip)
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.endpoints[ip]
	if st == nil {
		if len(d.endpoints) >= d.cfg.MaxEndpoints {
			return
		}
		st = &missState{ring: make([]int64, 0, d.cfg.RecentKeys), set: map[int64]int32{}}
		d.endpoints[ip] = st
	}
	for _, k := range keys {
		if len(st.ring) < cap(st.ring) {
			st.ring = append(st.ring, k)
		} else {
			old := st.ring[st.pos]
			if st.set[old]--; st.set[old] <= 0 {
				delete(st.set, old)
			}
			st.ring[st.pos] = k
			st.pos = (st.pos + 1) % len(st.ring)
		}
		st.set[k]++
	}
	st.prompts++
}

// Admitted records that the engine at ip stored key. Endpoints never sent a prompt are
// not judged.
func (d *MissDetector) Admitted(ip string, key int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.endpoints[ip]
	if st == nil {
		return
	}
	if _, ok := st.set[key]; ok {
		st.admits, st.prompts = 0, 0
		if st.suspected {
			st.suspected = false
			d.gauge.WithLabelValues(ip).Set(0)
			d.log.Info("lmcache: endpoint's stored chunks match sent prompts again", "ip", ip)
		}
		return
	}
	st.admits++
	if st.suspected || st.admits < d.cfg.MinAdmits || st.prompts < d.cfg.MinPrompts {
		return
	}
	st.suspected = true
	d.gauge.WithLabelValues(ip).Set(1)
	d.warnings.Inc()
	d.log.Warn(fmt.Sprintf("lmcache: endpoint %s stored %d chunks since the picker last saw one of its prompts' chunks, while %d prompts were sent to it: "+
		"its cache events never match what the picker computes, so cache-aware routing is blind for it. Likely causes: "+
		"the engines' PYTHONHASHSEED differs from the picker's (%s); the picker's tokenizer differs from the engine's; "+
		"LMCache chunk_size differs (picker: %d); the key format differs (picker: %s; LMCache 0.3.x hashes None, newer ()). "+
		"Check with: loadaware-epp lmcache-keys --hash-seed SEED < token_ids.json, against the keys in the engine's LMCache log",
		ip, st.admits, st.prompts, d.seedText(), d.chunkSize(), d.cfg.Keys.Format), "ip", ip)
}

func (d *MissDetector) seedText() string {
	if d.cfg.Keys.HashSeed == "" {
		return "not given to the detector"
	}
	return "PYTHONHASHSEED=" + d.cfg.Keys.HashSeed
}

func (d *MissDetector) chunkSize() int {
	if d.cfg.Keys.ChunkSize == 0 {
		return DefaultChunkSize
	}
	return d.cfg.Keys.ChunkSize
}

// Suspected returns the IPs currently flagged, sorted.
func (d *MissDetector) Suspected() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for ip, st := range d.endpoints {
		if st.suspected {
			out = append(out, ip)
		}
	}
	sort.Strings(out)
	return out
}

// canonicalIP turns "ip", "ip:port" or "[v6]:port" into netip's canonical text; anything
// else (a host name) is returned trimmed.
func canonicalIP(s string) string {
	s = strings.TrimSpace(s)
	// An IPv4 "ip:port", as the picker names the endpoint it routed to, first: parsing it
	// whole as an address fails, and the error and the general path below took two
	// allocations every decision.
	if i := strings.IndexByte(s, ':'); i > 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		if a, err := netip.ParseAddr(s[:i]); err == nil && a.Is4() {
			return canonicalForm(a, s[:i])
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return canonicalForm(a, s)
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(h); err == nil {
			return a.Unmap().String()
		}
		return h
	}
	return s
}

// canonicalForm is a's canonical text: s itself when s already is (most addresses arrive
// canonical: every message of a connection names its peer), else a new string.
func canonicalForm(a netip.Addr, s string) string {
	var buf [64]byte
	if c := a.Unmap().AppendTo(buf[:0]); string(c) != s {
		return string(c)
	}
	return s
}
