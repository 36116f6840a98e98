// Package stackcheck judges whether a deployment meets every precondition of cache-aware
// routing: from facts gathered about the picker, its engines and the gateway, it gives
// one row per check, each failure with its fix. It is the pure part of `loadaware-epp
// check`: it does no I/O (the command gathers the facts) and reads no clock.
//
// A row that cannot be judged because an earlier row failed (the engine is down, the
// tokenizer differs, the stream is silent) is Blocked, naming that row: one broken
// precondition fails one row, and its consequences point at it.
package stackcheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/loadaware/loadaware-epp/cachealarm"
)

// Status is a row's outcome.
type Status string

// The outcomes. Only Pass and Skip let the check succeed.
const (
	Pass    Status = "pass"
	Fail    Status = "FAIL"
	Blocked Status = "blocked" // not judged: a row it depends on failed
	Skip    Status = "skip"    // does not apply to this deployment
)

// Row is one check's verdict.
type Row struct {
	Check  string // what is checked
	Target string // the endpoint, port or component; "" for the deployment
	Status Status
	Detail string // what was seen
	Fix    string // what to do, for Fail and Blocked
}

// Facts is everything gathered about a deployment. Fields of parts not gathered are
// zero; an Err field says why a fact could not be had.
type Facts struct {
	StateErr   string      // why GET /admin/state failed
	State      PickerState // valid when StateErr is empty
	MetricsErr string      // why GET /metrics failed
	Metrics    Metrics
	Engines    []Engine
	// Ports are the LMCache controller ports dialled at the picker's host.
	Ports []Port
	// Gateway is the registry probe through the gateway; nil when no gateway was given.
	Gateway *GatewayProbe
	// HeartbeatMaxAge is how long ago (seconds) an instance that sends heartbeats may have
	// been heard from.
	HeartbeatMaxAge float64
	// Replicas is how many picker replicas should see each other (0: not checked).
	Replicas int
}

// Metrics are the values read from the picker's /metrics.
type Metrics struct {
	GapDrops          float64  // loadaware_kvevents_endpoint_drops_total{reason="gap"}
	IncompleteReplays float64  // loadaware_kvevents_replays_total{outcome="incomplete"}
	SilentMiss        []string // IPs with loadaware_lmcache_silent_miss 1
	NATS              bool     // loadaware_replica_nats_connected is exported
	NATSConnected     bool
	Peers             int // loadaware_replica_peers
}

// Engine is what was seen of one endpoint.
type Engine struct {
	Endpoint   string
	HealthErr  string // "" when GET /health answered 200
	MetricsErr string // "" when GET /metrics exports vLLM's series
	// TokenizeErr says why parity could not be sampled; else Text and Chat compare the
	// picker's ids with the engine's /tokenize.
	TokenizeErr string
	Text, Chat  cachealarm.Sample
	// EventPortErr is the dial of its KV events PUB port ("" reachable).
	EventPortErr string
	// Stream is its KV event stream as the picker saw it before and after a prompt was
	// sent straight to the engine.
	StreamBefore, StreamAfter *Stream
	// Credit is what the picker credits the engine with, of a prompt of several chunks
	// sent straight to it (tokens), or CreditErr why that could not be measured.
	Credit      int
	CreditErr   string
	PromptTotal int // the prompt's tokens as the picker counts them
}

// Port is one dialled port.
type Port struct {
	Name, Addr, Err string
}

// GatewayProbe is one long prompt sent several times through the gateway, each asking
// for the decision header.
type GatewayProbe struct {
	Err     string   // why the probe could not run
	Winners []string // the endpoint each request went to ("" when the header was missing)
	Matched []int    // the tokens the picker credited the winner with, per request
}

// Passed reports whether rows let the check succeed (no Fail, no Blocked).
func Passed(rows []Row) bool {
	return !slices.ContainsFunc(rows, func(r Row) bool { return r.Status == Fail || r.Status == Blocked })
}

// Evaluate turns facts into rows, in a fixed order: the picker, each engine, the cache
// source, the gateway probe, the replicas, the alarm.
func Evaluate(f Facts) []Row {
	e := evaluator{f: f, failed: map[string]string{}}
	return e.run()
}

type evaluator struct {
	f      Facts
	rows   []Row
	failed map[string]string // key -> the check of a failed or blocked row, for blocking
}

// Row names, shared by the rows and the blocking.
const (
	chkAdmin     = "picker admin state"
	chkMetrics   = "picker metrics"
	chkHealth    = "engine healthy"
	chkEngMet    = "engine /metrics"
	chkTokenizer = "tokenizer parity"
	chkPorts     = "LMCache controller port reachable"
	chkRegister  = "LMCache instance registered"
	chkHeartbeat = "LMCache heartbeats fresh"
	chkCredit    = "cache credited (hash seed, chunk size)"
	chkEvPort    = "KV events port reachable"
	chkStream    = "KV event stream live"
	chkGaps      = "KV events: no unrecovered gap"
	chkProbe     = "registry probe through the gateway"
	chkReplicas  = "replicas: NATS connected, peers seen"
	chkAlarm     = "cache-signal alarm quiet"
)

func (e *evaluator) add(key string, r Row) {
	if r.Status == Fail || r.Status == Blocked {
		e.failed[key] = r.Check
	}
	e.rows = append(e.rows, r)
}

// blockedBy returns the first of keys whose row failed.
func (e *evaluator) blockedBy(keys ...string) (string, bool) {
	for _, k := range keys {
		if c, ok := e.failed[k]; ok {
			return c, true
		}
	}
	return "", false
}

// judge adds a row for key: blocked when one of deps failed and the row itself would
// fail, else as given.
func (e *evaluator) judge(key string, r Row, deps ...string) {
	if r.Status == Fail {
		if by, ok := e.blockedBy(deps...); ok {
			r.Status, r.Detail, r.Fix = Blocked, "not judged: "+by+" failed ("+r.Detail+")", "fix "+by+" first"
		}
	}
	e.add(key, r)
}

func pass(check, target, detail string) Row {
	return Row{Check: check, Target: target, Status: Pass, Detail: detail}
}
func fail(check, target, detail, fix string) Row {
	return Row{Check: check, Target: target, Status: Fail, Detail: detail, Fix: fix}
}
func skip(check, target, detail string) Row {
	return Row{Check: check, Target: target, Status: Skip, Detail: detail}
}

func (e *evaluator) run() []Row {
	f := e.f
	if f.StateErr != "" {
		e.add(chkAdmin, fail(chkAdmin, "", f.StateErr,
			"set LOADAWARE_ADMIN_TOKEN to the picker's --admin-token and pass -metrics http://PICKER:9090 (the picker's metrics port)"))
		return e.rows
	}
	st := f.State
	e.add(chkAdmin, pass(chkAdmin, "", fmt.Sprintf("%d endpoints, cache source %s", len(st.Endpoints), st.CacheSource)))
	if len(st.Endpoints) == 0 {
		e.add(chkAdmin+"/endpoints", fail(chkAdmin, "endpoints", "the picker knows no endpoint",
			"pass --endpoints ip:port,... or check the InferencePool / --endpoint-selector matches the engines' pods"))
	}
	if f.MetricsErr != "" {
		e.add(chkMetrics, fail(chkMetrics, "", f.MetricsErr, "the picker's /metrics must be reachable at the -metrics URL"))
	} else {
		e.add(chkMetrics, pass(chkMetrics, "", "read"))
	}
	for _, en := range f.Engines {
		e.engine(en)
	}
	lm := st.CacheSource == "lmcache" || st.CacheSource == "both"
	kv := st.CacheSource == "vllm-events" || st.CacheSource == "both"
	if lm {
		e.lmcache()
	}
	if kv {
		e.kvEvents()
	}
	for _, en := range f.Engines {
		e.credit(en, lm, kv)
	}
	e.probe()
	e.replicas()
	e.alarm()
	return e.rows
}

func (e *evaluator) engine(en Engine) {
	ep := en.Endpoint
	if en.HealthErr != "" {
		e.add(chkHealth+ep, fail(chkHealth, ep, en.HealthErr,
			"the engine does not answer GET /health: restart it, or take it out of the pool; the picker routes around it meanwhile"))
	} else {
		e.add(chkHealth+ep, pass(chkHealth, ep, "GET /health 200"))
	}
	if en.MetricsErr != "" {
		e.judge(chkEngMet+ep, fail(chkEngMet, ep, en.MetricsErr,
			"expose the engine's /metrics (vLLM serves it on its API port): the load view and replicas read vllm:num_requests_running/_waiting there"),
			chkHealth+ep)
	} else {
		e.add(chkEngMet+ep, pass(chkEngMet, ep, "vllm:num_requests_running exported"))
	}
	e.tokenizer(en)
}

func (e *evaluator) tokenizer(en Engine) {
	ep, st := en.Endpoint, e.f.State
	switch {
	case st.Tokenizer == "" && !st.FromEngine:
		// Token-id prompts ({"prompt": [ids]}) need none, and the credit checks and the
		// registry probe then send those: only clients that send text lose the cache signal.
		e.add(chkTokenizer+ep, skip(chkTokenizer, ep, "the picker has no tokenizer: only token-id prompts are routed on cache, text and chat prompts on load alone (if clients send text, start it with --tokenizer PATH or --model ORG/NAME)"))
	case en.TokenizeErr != "":
		e.judge(chkTokenizer+ep, fail(chkTokenizer, ep, en.TokenizeErr,
			"let the picker reach the engine's POST /tokenize (vLLM serves it on its API port), so parity can be checked"),
			chkHealth+ep)
	case !en.Text.OK || !en.Chat.OK:
		var d []string
		for _, s := range []cachealarm.Sample{en.Text, en.Chat} {
			if !s.OK {
				d = append(d, s.Detail)
			}
		}
		fix := "load the served model's tokenizer in the picker (--tokenizer PATH or --model ORG/NAME, the same revision as the engines)"
		if en.Text.OK {
			fix = "the chat template differs: give the picker the served model's tokenizer_config.json (its chat_template), or start vLLM without --chat-template overrides"
		}
		e.add(chkTokenizer+ep, fail(chkTokenizer, ep, strings.Join(d, "; "), fix))
	default:
		e.add(chkTokenizer+ep, pass(chkTokenizer, ep, "text and chat ids equal the engine's /tokenize ("+st.Tokenizer+")"))
	}
}

func (e *evaluator) lmcache() {
	f, st := e.f, e.f.State
	if st.LMCache == nil {
		e.add(chkPorts, fail(chkPorts, "", "the picker reports no LMCache controller", "start the picker with --lmcache-pull-port (default 9000)"))
		return
	}
	var bad, ok []string
	for _, p := range f.Ports {
		if p.Err != "" {
			bad = append(bad, p.Name+" "+p.Addr+": "+p.Err)
		} else {
			ok = append(ok, p.Name+" "+p.Addr)
		}
	}
	if len(bad) > 0 {
		e.add(chkPorts, fail(chkPorts, "", strings.Join(bad, "; "),
			"expose the controller ports (pull 9000, reply 9001) on the picker's Service and container ports; the engines' LMCACHE_CONTROLLER_PULL_URL / _REPLY_URL must name them"))
	} else {
		e.add(chkPorts, pass(chkPorts, "", strings.Join(ok, ", ")))
	}
	for _, en := range f.Engines {
		ep, ip := en.Endpoint, cachealarm.HostOf(en.Endpoint)
		var active, other []Instance
		for _, in := range st.LMCache.Instances {
			switch {
			case in.IP == ip && in.State == "active":
				active = append(active, in)
			case in.IP == ip:
				other = append(other, in)
			}
		}
		if len(active) == 0 {
			detail := "no LMCache instance registered with IP " + ip
			if len(other) > 0 {
				detail = fmt.Sprintf("instance %s on %s is %s", other[0].ID, ip, other[0].State)
			}
			e.judge(chkRegister+ep, fail(chkRegister, ep, detail,
				"point the engine's LMCACHE_CONTROLLER_PULL_URL (and _REPLY_URL) at the picker's ports 9000/9001, and let the worker report the pod IP (the endpoint's IP) as its ip"),
				chkHealth+ep, chkPorts)
			e.failed[chkHeartbeat+ep] = chkRegister
			e.add(chkHeartbeat+ep, Row{Check: chkHeartbeat, Target: ep, Status: Blocked,
				Detail: "not judged: " + chkRegister + " failed", Fix: "fix " + chkRegister + " first"})
			continue
		}
		in := active[0]
		e.add(chkRegister+ep, pass(chkRegister, ep, fmt.Sprintf("instance %s, %d keys", in.ID, in.Keys)))
		switch {
		case !in.Heartbeats:
			e.add(chkHeartbeat+ep, pass(chkHeartbeat, ep, "the worker sends no heartbeats (LMCache 0.3.x): the instance never expires"))
		case in.LastSeen > f.HeartbeatMaxAge:
			e.judge(chkHeartbeat+ep, fail(chkHeartbeat, ep, fmt.Sprintf("last heard %.0fs ago", in.LastSeen),
				"the worker stopped heartbeating: check the engine's LMCache worker and that it reaches the picker's reply/heartbeat port"),
				chkHealth+ep)
		default:
			e.add(chkHeartbeat+ep, pass(chkHeartbeat, ep, fmt.Sprintf("last heard %.0fs ago", in.LastSeen)))
		}
	}
}

func (e *evaluator) kvEvents() {
	f, st := e.f, e.f.State
	for _, en := range f.Engines {
		ep := en.Endpoint
		if en.EventPortErr != "" {
			e.judge(chkEvPort+ep, fail(chkEvPort, ep, en.EventPortErr,
				"expose the engine's KV events PUB port (vLLM --kv-events-config endpoint tcp://*:5557) on the pod, and set --kv-events-port to it"),
				chkHealth+ep)
		} else {
			e.add(chkEvPort+ep, pass(chkEvPort, ep, "connected"))
		}
		b, a := en.StreamBefore, en.StreamAfter
		switch {
		case (a == nil || a.Batches == 0) && en.CreditErr != "":
			e.judge(chkStream+ep, fail(chkStream, ep, "no KV event batch received, and the check's prompt did not reach the engine: "+en.CreditErr,
				"let the check send the engine a prompt (the reason above), then run it again"),
				chkHealth+ep, chkEvPort+ep)
		case a == nil || a.Batches == 0:
			e.judge(chkStream+ep, fail(chkStream, ep, "no KV event batch received from the engine, even after a prompt was sent to it",
				`start vLLM with --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557"}' and --enable-prefix-caching`),
				chkHealth+ep, chkEvPort+ep)
		case b != nil && a.Seq <= b.Seq:
			e.judge(chkStream+ep, fail(chkStream, ep, fmt.Sprintf("sequence stayed at %d after a prompt was sent to the engine (last batch %.0fs ago)", a.Seq, a.LastBatch),
				"the engine stopped publishing KV events: check its --kv-events-config and restart it"),
				chkHealth+ep, chkEvPort+ep)
		default:
			e.add(chkStream+ep, pass(chkStream, ep, fmt.Sprintf("sequence %d, %d batches", a.Seq, a.Batches)))
		}
	}
	switch {
	case f.MetricsErr != "":
		e.add(chkGaps, Row{Check: chkGaps, Status: Blocked, Detail: "not judged: " + chkMetrics + " failed", Fix: "fix " + chkMetrics + " first"})
	case f.Metrics.GapDrops > 0 || f.Metrics.IncompleteReplays > 0:
		fix := "give the engines a replay socket (--kv-events-config replay_endpoint) and the picker --kv-events-replay-port"
		if st.KVEvents != nil && st.KVEvents.ReplayPort != 0 {
			fix = "the engines' replay buffer is too short for the gaps: raise buffer_steps in --kv-events-config"
		}
		e.add(chkGaps, fail(chkGaps, "", fmt.Sprintf("%g endpoint drops after gaps, %g incomplete replays", f.Metrics.GapDrops, f.Metrics.IncompleteReplays), fix))
	default:
		e.add(chkGaps, pass(chkGaps, "", "no gap dropped an endpoint's entries"))
	}
}

func (e *evaluator) credit(en Engine, lm, kv bool) {
	ep := en.Endpoint
	deps := []string{chkHealth + ep, chkTokenizer + ep}
	fix := ""
	switch {
	case lm && kv:
		deps = append(deps, chkRegister+ep, chkStream+ep)
		fix = "neither source credits the engine: see the LMCache fix (PYTHONHASHSEED, LMCACHE_CHUNK_SIZE) and the KV events fix (--block-size)"
	case lm:
		deps = append(deps, chkRegister+ep)
		ks := e.f.State.LMCache
		fix = fmt.Sprintf("the engine's LMCache hashes differently: give the picker the engines' PYTHONHASHSEED (--lmcache-hash-seed, now %s), LMCACHE_CHUNK_SIZE (--lmcache-chunk-size, now %d) and key format (--lmcache-key-format, now %s); check with loadaware-epp lmcache-keys",
			ks.HashSeed, ks.ChunkSize, ks.KeyFormat)
	case kv:
		deps = append(deps, chkStream+ep)
		fix = "the engine's KV events do not match the picker's prompt ids: check vLLM's --block-size and that the events carry token ids (vLLM 0.10 or newer)"
	default:
		return
	}
	silent := slices.Contains(e.f.Metrics.SilentMiss, cachealarm.HostOf(ep))
	switch {
	case en.CreditErr != "":
		e.judge(chkCredit+ep, fail(chkCredit, ep, en.CreditErr, "the engine must serve POST /v1/completions to the check"), deps...)
	case en.Credit <= 0 || silent:
		d := fmt.Sprintf("a %d-token prompt sent to the engine is credited with %d tokens", en.PromptTotal, en.Credit)
		if silent {
			d += "; the picker's silent-miss detector flags " + cachealarm.HostOf(ep)
		}
		e.judge(chkCredit+ep, fail(chkCredit, ep, d, fix), deps...)
	default:
		e.add(chkCredit+ep, pass(chkCredit, ep, fmt.Sprintf("%d of %d prompt tokens credited", en.Credit, en.PromptTotal)))
	}
}

func (e *evaluator) probe() {
	g := e.f.Gateway
	if g == nil {
		e.add(chkProbe, skip(chkProbe, "", "no -gateway given"))
		return
	}
	var credited []string
	for _, en := range e.f.Engines {
		credited = append(credited, chkCredit+en.Endpoint)
	}
	if g.Err != "" {
		e.judge(chkProbe, fail(chkProbe, "", g.Err,
			"send the check's requests through the gateway with the decision header: run the picker with --explain token (the default) and let the gateway return x-loadaware-decision"), credited...)
		return
	}
	winners := map[string]bool{}
	uncredited := 0
	for i, w := range g.Winners {
		winners[w] = true
		if i > 0 && g.Matched[i] == 0 {
			uncredited++
		}
	}
	switch {
	case len(winners) != 1:
		ws := make([]string, 0, len(winners))
		for w := range winners {
			ws = append(ws, w)
		}
		slices.Sort(ws)
		e.judge(chkProbe, fail(chkProbe, "", fmt.Sprintf("%d requests of one prefix went to %s", len(g.Winners), strings.Join(ws, ", ")),
			"the picker does not see the prefix cached: fix the rows above; with a busy fleet, lower --beta to weigh cache affinity more"), credited...)
	case uncredited > 0:
		e.judge(chkProbe, fail(chkProbe, "", fmt.Sprintf("%d of %d repeats were not credited on %s", uncredited, len(g.Winners)-1, g.Winners[0]),
			"the engine's cache events do not reach the picker's index in time, or do not match: fix the rows above"), credited...)
	default:
		e.add(chkProbe, pass(chkProbe, "", fmt.Sprintf("%d requests on %s, repeats credited %v tokens", len(g.Winners), g.Winners[0], g.Matched[1:])))
	}
}

func (e *evaluator) replicas() {
	f := e.f
	if f.State.Replicas == nil {
		e.add(chkReplicas, skip(chkReplicas, "", "a lone picker (no --nats-url)"))
		return
	}
	switch {
	case f.MetricsErr != "":
		e.add(chkReplicas, Row{Check: chkReplicas, Status: Blocked, Detail: "not judged: " + chkMetrics + " failed", Fix: "fix " + chkMetrics + " first"})
	case !f.Metrics.NATSConnected:
		e.add(chkReplicas, fail(chkReplicas, "", "not connected to NATS", "check --nats-url and that the NATS server is up and reachable from the picker"))
	case f.Replicas > 0 && f.Metrics.Peers != f.Replicas-1:
		e.add(chkReplicas, fail(chkReplicas, "", fmt.Sprintf("%d peers seen, want %d", f.Metrics.Peers, f.Replicas-1),
			"every replica must use the same --nats-url and --nats-subject"))
	default:
		e.add(chkReplicas, pass(chkReplicas, "", fmt.Sprintf("connected, %d peers", f.Metrics.Peers)))
	}
}

func (e *evaluator) alarm() {
	a := e.f.State.Alarm
	if a == nil {
		e.add(chkAlarm, skip(chkAlarm, "", "the picker runs without the alarm (--cache-alarm-window 0)"))
		return
	}
	var in []string
	for _, s := range a.Endpoints {
		if s.Reason != "" {
			in = append(in, s.Endpoint+" "+s.Reason)
		}
	}
	if len(in) > 0 {
		e.add(chkAlarm, fail(chkAlarm, "", "in alarm: "+strings.Join(in, ", "),
			"the picker's log says why (cache signal dead); the rows above name the fix"))
		return
	}
	e.add(chkAlarm, pass(chkAlarm, "", fmt.Sprintf("no endpoint in alarm (window %gs)", a.WindowSeconds)))
}
