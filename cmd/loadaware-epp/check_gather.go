package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/cachealarm"
	"github.com/loadaware/loadaware-epp/stackcheck"
	"github.com/loadaware/loadaware-epp/tokenize"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// gatherer collects the facts of a deployment: the picker's /admin/state, /metrics and
// /admin/lookup, each engine's /health, /metrics, /tokenize, /v1/completions and KV
// events port, the controller ports, and the registry probe through the gateway.
type gatherer struct {
	o     checkOptions
	hc    *http.Client
	eng   tokenize.EngineClient
	nonce string // makes this run's probe prompts new to every cache
	ids   bool   // the picker has no tokenizer: probe prompts are token ids
}

func newGatherer(o checkOptions) *gatherer {
	hc := &http.Client{Timeout: o.timeout}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &gatherer{o: o, hc: hc, eng: tokenize.EngineClient{HTTP: hc, Timeout: o.timeout}, nonce: hex.EncodeToString(b)}
}

func (g *gatherer) gather(ctx context.Context) stackcheck.Facts {
	f := stackcheck.Facts{HeartbeatMaxAge: g.o.heartbeatMaxAge.Seconds(), Replicas: g.o.replicas}
	st, err := g.state(ctx)
	if err != nil {
		f.StateErr = err.Error()
		return f
	}
	f.State = st
	g.ids = st.Tokenizer == "" && !st.FromEngine
	if fams, err := g.metrics(ctx); err != nil {
		f.MetricsErr = err.Error()
	} else {
		f.Metrics = metricsFacts(fams)
	}
	chunk := 256
	if st.LMCache != nil {
		chunk = st.LMCache.ChunkSize
		host := hostOf(g.o.metrics)
		for _, p := range []struct {
			name string
			port int
		}{{"pull", st.LMCache.PullPort}, {"reply", st.LMCache.ReplyPort}} {
			if p.port != 0 {
				addr := net.JoinHostPort(host, strconv.Itoa(p.port))
				f.Ports = append(f.Ports, stackcheck.Port{Name: p.name, Addr: addr, Err: g.dial(ctx, addr)})
			}
		}
	}
	models := map[string]string{}
	for _, ep := range st.Endpoints {
		en := stackcheck.Engine{Endpoint: ep}
		models[ep] = g.engine(ctx, &en, st)
		f.Engines = append(f.Engines, en)
	}
	g.credit(ctx, f.Engines, models, chunk)
	if after, ok := g.streamsAfter(ctx, st, f.Engines); ok {
		for i := range f.Engines {
			f.Engines[i].StreamBefore = stream(st, f.Engines[i].Endpoint)
			f.Engines[i].StreamAfter = stream(after, f.Engines[i].Endpoint)
		}
	}
	if g.o.gateway != "" {
		f.Gateway = g.probe(ctx, st, firstModel(models), chunk)
	}
	return f
}

// streamsAfter reads the picker's state again once every engine the check prompted
// shows a KV event batch newer than before's (or -settle passed): the subscriber
// counts a batch after applying it, so the index can credit a prompt a moment before
// the count moves. ok is false when the state cannot be read or the picker has no KV events
// source.
func (g *gatherer) streamsAfter(ctx context.Context, before stackcheck.PickerState, engines []stackcheck.Engine) (after stackcheck.PickerState, ok bool) {
	ok = true
	g.poll(ctx, func() bool {
		var err error
		if after, err = g.state(ctx); err != nil || after.KVEvents == nil {
			ok = false
			return true
		}
		for _, en := range engines {
			if en.CreditErr != "" {
				continue
			}
			b, a := stream(before, en.Endpoint), stream(after, en.Endpoint)
			if a == nil || a.Batches == 0 || b != nil && a.Seq <= b.Seq {
				return false
			}
		}
		return true
	})
	return after, ok
}

func stream(st stackcheck.PickerState, ep string) *stackcheck.Stream {
	if st.KVEvents == nil {
		return nil
	}
	for _, s := range st.KVEvents.Streams {
		if s.Endpoint == ep {
			return &s
		}
	}
	return nil
}

func firstModel(models map[string]string) string {
	for _, m := range models {
		if m != "" {
			return m
		}
	}
	return ""
}

// engine fills what one engine shows by itself, and returns the model it serves.
func (g *gatherer) engine(ctx context.Context, en *stackcheck.Engine, st stackcheck.PickerState) string {
	ep := en.Endpoint
	if code, _, err := g.get(ctx, engineURL(ep, "/health"), ""); err != nil {
		en.HealthErr = err.Error()
	} else if code != http.StatusOK {
		en.HealthErr = fmt.Sprintf("GET /health answered %d", code)
	}
	if code, body, err := g.get(ctx, engineURL(ep, "/metrics"), ""); err != nil {
		en.MetricsErr = err.Error()
	} else if code != http.StatusOK || !bytes.Contains(body, []byte("vllm:num_requests_running")) {
		en.MetricsErr = fmt.Sprintf("GET /metrics answered %d without vllm:num_requests_running", code)
	}
	model := g.o.model
	if model == "" {
		model = g.servedModel(ctx, ep)
	}
	if st.KVEvents != nil {
		en.EventPortErr = g.dial(ctx, net.JoinHostPort(cachealarm.HostOf(ep), strconv.Itoa(st.KVEvents.Port)))
	}
	if st.Tokenizer == "" && !st.FromEngine {
		return model // nothing to compare with
	}
	text, err := g.lookup(ctx, map[string]any{"model": model, "prompt": cachealarm.ParityText})
	if err == nil {
		var theirs []uint32
		if theirs, err = g.eng.TokenizePrompt(ctx, ep, model, cachealarm.ParityText); err == nil {
			en.Text = cachealarm.Compare("text", text.Tokens, theirs)
		}
	}
	if err == nil {
		chat := cachealarm.ParityChat(model)
		var mine stackcheck.Lookup
		if mine, err = g.lookup(ctx, json.RawMessage(chat)); err == nil {
			var theirs []uint32
			if theirs, err = g.eng.TokenizeChat(ctx, ep, chat); err == nil {
				en.Chat = cachealarm.Compare("chat", mine.Tokens, theirs)
			}
		}
	}
	if err != nil {
		en.TokenizeErr = err.Error()
	}
	return model
}

// servedModel is the first model of the engine's GET /v1/models ("" when unknown).
func (g *gatherer) servedModel(ctx context.Context, ep string) string {
	code, body, err := g.get(ctx, engineURL(ep, "/v1/models"), g.o.engineKey)
	if err != nil || code != http.StatusOK {
		return ""
	}
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &m) != nil || len(m.Data) == 0 {
		return ""
	}
	return m.Data[0].ID
}

// credit sends each healthy engine a prompt of several chunks of its own, straight, and
// waits (up to -settle) for the picker to credit each with it.
func (g *gatherer) credit(ctx context.Context, engines []stackcheck.Engine, models map[string]string, chunk int) {
	prompts := map[string]any{}
	for i := range engines {
		en := &engines[i]
		if en.HealthErr != "" {
			en.CreditErr = "the engine is down"
			continue
		}
		p := g.probePrompt(g.nonce+" "+en.Endpoint, chunk)
		if err := g.complete(ctx, engineURL(en.Endpoint, "/v1/completions"), models[en.Endpoint], p); err != nil {
			en.CreditErr = err.Error()
			continue
		}
		prompts[en.Endpoint] = p
	}
	g.poll(ctx, func() bool {
		waiting := false
		for i := range engines {
			en := &engines[i]
			p, ok := prompts[en.Endpoint]
			if !ok || en.Credit > 0 {
				continue
			}
			l, err := g.lookup(ctx, map[string]any{"model": models[en.Endpoint], "prompt": p})
			if err != nil {
				en.CreditErr = err.Error()
				delete(prompts, en.Endpoint)
				continue
			}
			en.PromptTotal, en.Credit = len(l.Tokens), l.Matched[en.Endpoint]
			waiting = waiting || en.Credit == 0
		}
		return !waiting
	})
}

// poll runs done until it reports true, -settle has passed or ctx ends, 50 ms apart: the
// engines' cache events reach the picker on their own sockets, with no signal to await.
func (g *gatherer) poll(ctx context.Context, done func() bool) {
	deadline := time.Now().Add(g.o.settle)
	for !done() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
}

// probe is the registry probe: one long prefix sent -probe-requests times through the
// gateway. Each request's endpoint and credit are read from the picker's
// loadaware_routed_{prompt,matched}_tokens_total (the endpoint whose prompt tokens grew);
// after the first, the probe waits for the picker to credit it.
func (g *gatherer) probe(ctx context.Context, st stackcheck.PickerState, model string, chunk int) *stackcheck.GatewayProbe {
	p := &stackcheck.GatewayProbe{}
	text := g.probePrompt(g.nonce+" gateway", chunk)
	for i := range g.o.probeRequests {
		before, err := g.routed(ctx)
		if err != nil {
			p.Err = err.Error()
			return p
		}
		if err := g.complete(ctx, g.o.gateway+"/v1/completions", model, text); err != nil {
			p.Err = "through the gateway: " + err.Error()
			return p
		}
		after, err := g.routed(ctx)
		if err != nil {
			p.Err = err.Error()
			return p
		}
		winner, grew := "", 0.0
		for _, ep := range st.Endpoints {
			if d := after.prompt[ep] - before.prompt[ep]; d > grew {
				winner, grew = ep, d
			}
		}
		if winner == "" {
			p.Err = "the picker routed none of the probe's requests with token ids (is a tokenizer configured, and does the gateway call the picker?)"
			return p
		}
		p.Winners = append(p.Winners, winner)
		p.Matched = append(p.Matched, int(after.matched[winner]-before.matched[winner]))
		if i == 0 {
			g.poll(ctx, func() bool {
				l, err := g.lookup(ctx, map[string]any{"model": model, "prompt": text})
				return err != nil || l.Matched[winner] > 0
			})
		}
	}
	return p
}

// probePrompt is probeText, or with a picker that has no tokenizer probeIDs.
func (g *gatherer) probePrompt(seed string, chunk int) any {
	if g.ids {
		return probeIDs(seed, chunk)
	}
	return probeText(seed, chunk)
}

// probeIDs is a token-id prompt of three chunks, new to every cache because of its seed.
func probeIDs(seed string, chunk int) []uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(seed))
	x := h.Sum32() | 1
	ids := make([]uint32, 3*max(chunk, 16))
	for i := range ids {
		x ^= x << 13 // xorshift32: distinct ids for distinct seeds
		x ^= x >> 17
		x ^= x << 5
		ids[i] = 1000 + x%30000
	}
	return ids
}

// probeText is a prompt of about three chunks (words are one token or more), new to
// every cache because of its seed.
func probeText(seed string, chunk int) string {
	words := []string{"routing", "cache", "prefix", "engine", "token", "block", "picker", "gateway"}
	var b strings.Builder
	b.WriteString("loadaware-epp check " + seed + ":")
	for i := range 3 * max(chunk, 16) {
		b.WriteString(" " + words[i%len(words)])
	}
	return b.String()
}

type routedCounts struct{ prompt, matched map[string]float64 }

func (g *gatherer) routed(ctx context.Context) (routedCounts, error) {
	fams, err := g.metrics(ctx)
	if err != nil {
		return routedCounts{}, err
	}
	return routedCounts{prompt: byEndpoint(fams["loadaware_routed_prompt_tokens_total"]),
		matched: byEndpoint(fams["loadaware_routed_matched_tokens_total"])}, nil
}

// byEndpoint sums a counter's series by their endpoint label.
func byEndpoint(mf *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "endpoint" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// metricsFacts reads what the check needs from the picker's metric families.
func metricsFacts(fams map[string]*dto.MetricFamily) stackcheck.Metrics {
	var m stackcheck.Metrics
	value := func(name, label, want string) float64 {
		v := 0.0
		for _, s := range fams[name].GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == label && l.GetValue() == want {
					v += s.GetCounter().GetValue() + s.GetGauge().GetValue()
				}
			}
		}
		return v
	}
	m.GapDrops = value("loadaware_kvevents_endpoint_drops_total", "reason", "gap")
	m.IncompleteReplays = value("loadaware_kvevents_replays_total", "outcome", "incomplete")
	for _, s := range fams["loadaware_lmcache_silent_miss"].GetMetric() {
		if s.GetGauge().GetValue() == 1 {
			for _, l := range s.GetLabel() {
				if l.GetName() == "ip" {
					m.SilentMiss = append(m.SilentMiss, l.GetValue())
				}
			}
		}
	}
	if c := fams["loadaware_replica_nats_connected"]; c != nil {
		m.NATS = true
		for _, s := range c.GetMetric() {
			m.NATSConnected = s.GetGauge().GetValue() == 1
		}
	}
	for _, s := range fams["loadaware_replica_peers"].GetMetric() {
		m.Peers = int(s.GetGauge().GetValue())
	}
	return m
}

func (g *gatherer) state(ctx context.Context) (stackcheck.PickerState, error) {
	var st stackcheck.PickerState
	code, body, err := g.get(ctx, g.o.metrics+"/admin/state", g.o.token)
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("GET /admin/state answered %d: %s", code, firstLine(body))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("GET /admin/state: not the picker's state (%v): is -metrics the picker's metrics port?", err)
	}
	return st, nil
}

func (g *gatherer) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	code, body, err := g.get(ctx, g.o.metrics+"/metrics", "")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics answered %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: not the Prometheus text format: %v", err)
	}
	return fams, nil
}

// lookup asks the picker's POST /admin/lookup about a prompt (a /tokenize body).
func (g *gatherer) lookup(ctx context.Context, body any) (stackcheck.Lookup, error) {
	var l stackcheck.Lookup
	b, err := json.Marshal(body)
	if err != nil {
		return l, err
	}
	code, out, err := g.do(ctx, http.MethodPost, g.o.metrics+"/admin/lookup", g.o.token, b)
	if err != nil {
		return l, err
	}
	if code != http.StatusOK {
		return l, fmt.Errorf("picker POST /admin/lookup answered %d: %s", code, firstLine(out))
	}
	if err := json.Unmarshal(out, &l); err != nil {
		return l, fmt.Errorf("picker POST /admin/lookup: %v", err)
	}
	if l.Error != "" {
		return l, fmt.Errorf("picker: %s", l.Error)
	}
	return l, nil
}

// complete sends one non-streamed completion of one token.
func (g *gatherer) complete(ctx context.Context, u, model string, prompt any) error {
	req := map[string]any{"prompt": prompt, "max_tokens": 1, "temperature": 0}
	if model != "" {
		req["model"] = model
	}
	b, _ := json.Marshal(req)
	code, body, err := g.do(ctx, http.MethodPost, u, g.o.engineKey, b)
	if err != nil {
		return err
	}
	if code == http.StatusUnauthorized {
		return fmt.Errorf("POST %s answered 401: the engine runs with --api-key; export VLLM_API_KEY=<that key> for the check", u)
	}
	if code != http.StatusOK {
		return fmt.Errorf("POST %s answered %d: %s", u, code, firstLine(body))
	}
	return nil
}

func (g *gatherer) get(ctx context.Context, u, token string) (int, []byte, error) {
	return g.do(ctx, http.MethodGet, u, token, nil)
}

func (g *gatherer) do(ctx context.Context, method, u, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	return resp.StatusCode, out, err
}

// dial reports why addr does not accept a TCP connection ("" when it does).
func (g *gatherer) dial(ctx context.Context, addr string) string {
	d := net.Dialer{Timeout: g.o.timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err.Error()
	}
	c.Close()
	return ""
}

func engineURL(ep, path string) string { return "http://" + ep + path }

// hostOf is the host of a URL.
func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Hostname()
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s[:min(len(s), 200)]
}
