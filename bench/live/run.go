package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/openai"
	"github.com/loadaware/loadaware-epp/bench/promtext"
	"github.com/loadaware/loadaware-epp/bench/workload"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
)

// WarmUpFunc returns the fleet arm's measured seed starts from under cfg: the engines
// after the seed's warm-up, their model time, and the chunk events the warm-up applied
// to the index, in order. vtime.WarmUp is the one the commands pass.
type WarmUpFunc func(ctx context.Context, cfg experiment.Config, arm experiment.Arm, seed uint64) (experiment.Warm, error)

// Options configure a live run beyond its sweep config.
type Options struct {
	// WarmUp produces the fleet the seed starts from; required (Run fails without it).
	WarmUp WarmUpFunc
	// Requests, when set, replace the seed's generated workload (in send order, SendAt from
	// the seed's start).
	Requests []workload.Request
	// Sequential sends each request only once every earlier one has ended, the picker has
	// released it, the controller has received every LMCache message the engines
	// produced and, with shared replicas, every replica has applied every message the
	// others published; send times are ignored. Routing decisions then do not depend on timing
	// (no load, a complete index): the mode of the test that compares them with virtual time.
	Sequential bool
	// Timeout bounds the measured seed from its start; requests unfinished by then fail.
	// 0 means the send window plus two minutes.
	Timeout time.Duration
	// Explain chooses the requests (by index) sent with x-loadaware-explain: 1; nil: none.
	Explain func(index int) bool
	// Progress, when set, is called after each request ends with the number ended and the total.
	Progress func(done, total int)
	// Logger receives the picker's, the gateway's and the engines' logs; nil discards them.
	Logger *slog.Logger
	// CacheSource is the picker's --cache-source: "" or "lmcache" (LMCache messages only),
	// "vllm-events" or "both" (the engines also publish their CPU tier as vLLM KV events,
	// see KVEventsConfig). The vLLM-events sources need cfg.Warmup 0: the warm-up's chunk
	// events exist only as LMCache messages.
	CacheSource string
	// Started, when set, is called once the fleet is up, before the first request, with the
	// picker's metrics URL and the gateway's base URL.
	Started func(metricsURL, gatewayURL string)
	// Hold, when set, is called with the result once the requests have been measured, while
	// the fleet is still up; the fleet closes when it returns.
	Hold func(ctx context.Context, r Result)
	// Replicas runs this many pickers (0 means 1), each with its own gateway; requests are
	// spread over them in turn, as Envoy spreads ext_proc streams over a cluster's hosts,
	// and engine i pushes its LMCache messages to picker i mod Replicas. With more than one
	// they share state over an in-process NATS server unless Naive (docs/replicas.md).
	Replicas int
	// Naive runs the replicas without shared state: each sees its own engines' LMCache
	// messages and its own bookings (the deployment issue 14 replaces).
	Naive bool
	// KillAt, when positive, kills the last replica abruptly (no graceful stop) as request
	// KillAt is sent; later requests go to the survivors (see Result.Replicas).
	KillAt int
	// FailOpen runs the gateways with failure_mode_allow true (gateway.Options.FailOpen,
	// the engines as the fallback): a request whose replica dies is carried on, not lost.
	FailOpen bool
	// AdminToken is every picker's --admin-token (its /admin endpoints); "" leaves them off.
	AdminToken string
}

// Result is one live run of one arm on one seed.
type Result struct {
	// Run is what the analysis reads, in the form virtual time produces it. Rows leave
	// CachedTokens, LoadedTokens and Preemptions zero (a client cannot see them); the
	// engines' counters are in Engines.
	Run experiment.Run
	// Decisions are the x-loadaware-decision headers of the explained requests, by index.
	Decisions map[int]string
	// Messages is how many LMCache messages (chunk admits and evicts) the engines pushed over
	// ZeroMQ during the measured seed; Received how many the picker's controller took in over
	// the same time (equal: the run waits for every message to arrive).
	Messages, Received int64
	// WarmEvents is how many warm-up chunk events were applied to the index directly.
	WarmEvents int
	// InFlightAfter is the picker's in-flight count once every request ended: 0 unless a
	// booking leaked.
	InFlightAfter float64
	// Wall is the run's wall time, start-up and warm-up included.
	Wall time.Duration
	// Replicas are the shared-state figures of a run with several replicas.
	Replicas ReplicaStats
}

// engineIPs returns the engines' loopback IPs: engine i listens on the host of experiment.Addrs
// (127.0.1.<i+1>), at a free port.
func engineIPs(n int) []string {
	out := make([]string, n)
	for i, a := range experiment.Addrs(n) {
		out[i] = fleet.IP(a)
	}
	return out
}

// Run runs arm on one seed live. The fleet starts where opts.WarmUp leaves it (with
// vtime.WarmUp, where virtual time's measured seed starts: the engines continue from the
// warmed-up models, and the warm-up's chunk events are applied to the picker's index in
// the order virtual time applied them); the picker's routing history (round-robin position, QPS window) starts empty. Then the seed's
// requests go open-loop through the gateway at their send times, each engine's running
// count is scraped from its /metrics every cfg.SampleInterval over the send window, and
// every LMCache message of the seed travels over ZeroMQ.
func Run(ctx context.Context, cfg experiment.Config, arm experiment.Arm, seed uint64, opts Options) (Result, error) {
	began := time.Now()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if arm.Policy == experiment.PolicyGIE {
		return Result{}, fmt.Errorf("live: arm %s is GIE's own scheduler, which runs only in virtual time: drop it from -arms or run it with the tournament or sweep", arm.Name)
	}
	reqs := opts.Requests
	if reqs == nil {
		var err error
		if reqs, err = workload.Generate(cfg.Workload, nil, seed); err != nil {
			return Result{}, err
		}
	}
	if len(reqs) == 0 {
		return Result{}, errors.New("live: no requests to send: pass at least one")
	}
	if opts.WarmUp == nil {
		return Result{}, errors.New("live: Options.WarmUp is nil: pass the warm-up the seed starts from (vtime.WarmUp)")
	}
	warm, err := opts.WarmUp(ctx, cfg, arm, seed)
	if err != nil {
		return Result{}, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kvSource := opts.CacheSource != "" && opts.CacheSource != picker.SourceLMCache
	if kvSource && (cfg.Protocol == experiment.ProtocolPublished || cfg.Warmup > 0) {
		return Result{}, fmt.Errorf("live: cache source %s needs a cold fleet: use the per-seed protocol with a warm-up of 0 requests (-protocol per-seed -warmup 0): a warm-up's chunk events exist only as LMCache messages", opts.CacheSource)
	}
	f, err := startFleet(ctx, cfg, arm, warm, log, opts)
	if err != nil {
		return Result{}, err
	}
	defer f.close()
	if opts.Started != nil {
		opts.Started("http://"+f.app.MetricsAddr()+"/metrics", f.url)
	}
	res, err := f.measure(ctx, cfg, arm, seed, reqs, opts)
	res.WarmEvents = len(warm.Events)
	res.Wall = time.Since(began)
	if err == nil && opts.Hold != nil {
		opts.Hold(ctx, res)
	}
	return res, err
}

// liveFleet is a running picker, its engines and the gateway in front.
type liveFleet struct {
	app     *app.App // the first replica
	engines []*Engine
	gw      *gateway.Gateway // the first replica's
	replicaSet
	srv    *http.Server
	url    string // the gateway's base URL
	client *http.Client
	log    *slog.Logger

	mu       sync.Mutex
	outcomes map[string]gateway.Outcome // by request id

	// baseReceived is the controller's message count that did not come from the engines'
	// sockets: what it showed before they started, plus the warm-up events applied directly.
	baseReceived float64
	kv           bool // the engines publish vLLM KV events to the picker
}

func startFleet(ctx context.Context, cfg experiment.Config, arm experiment.Arm, warm experiment.Warm, log *slog.Logger, opts Options) (f *liveFleet, err error) {
	source := opts.CacheSource
	f = &liveFleet{log: log, outcomes: map[string]gateway.Outcome{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	ips := engineIPs(cfg.Engines)
	listeners := make([]net.Listener, len(ips))
	defer func() { // the listeners no engine took
		if err != nil {
			for _, l := range listeners[len(f.engines):] {
				if l != nil {
					_ = l.Close()
				}
			}
		}
	}()
	endpoints := make([]string, len(ips))
	for i, ip := range ips {
		if listeners[i], err = listenOn(ip); err != nil {
			return nil, err
		}
		endpoints[i] = listeners[i].Addr().String()
	}
	keys := lmcache.KeyConfig{HashSeed: cfg.HashSeed, ChunkSize: cfg.Engine.ChunkSize}
	acfg := app.Config{
		GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0",
		Endpoints: endpoints, Policy: arm.Policy, Beta: arm.Beta, Explain: extproc.ExplainAll,
		AdminToken: opts.AdminToken,
		LMCache:    &app.LMCacheConfig{PullAddr: "127.0.0.1:0", Keys: keys, Allow: lmcache.AllowFleet},
	}
	var kvCfg *KVEventsConfig
	if f.kv = source != "" && source != picker.SourceLMCache; f.kv {
		if kvCfg, err = kvEventsPorts(ips[0]); err != nil {
			return nil, err
		}
		acfg.CacheSource = source
		acfg.KVEvents = &app.KVEventsConfig{Port: kvCfg.Port, ReplayPort: kvCfg.ReplayPort}
	}
	if err := f.startApps(ctx, acfg, log, opts); err != nil {
		return nil, fmt.Errorf("live: start the picker: %w", err)
	}
	before, err := f.received(ctx)
	if err != nil {
		return nil, err
	}
	f.baseReceived = before
	for i, ip := range ips {
		e, err := StartEngine(EngineConfig{From: warm.Engines[i], Clock: warm.Now, IP: ip, Listener: listeners[i],
			InstanceID: experiment.InstanceID(i), PullAddr: f.apps[i%len(f.apps)].LMCachePullAddr(), Keys: keys, KVEvents: kvCfg, Logger: log})
		if err != nil {
			return nil, err
		}
		f.engines = append(f.engines, e)
	}
	if err := f.awaitRegistered(ctx); err != nil {
		return nil, err
	}
	if err := f.awaitSubscribed(ctx); err != nil {
		return nil, err
	}
	if _, err := f.awaitDelivered(ctx, 10*time.Second); err != nil {
		return nil, err
	}
	// Shared replicas hear the engines' registrations over NATS: every replica must have
	// them all before the warm-up's events for those instances are applied beside them.
	if err := f.awaitReplicasSynced(ctx); err != nil {
		return nil, err
	}
	// The warm-up's chunk events go straight into the index, in the order virtual time
	// applied them (several sockets would not keep the order across engines). The engines
	// are idle, so whatever the controller's message count gains meanwhile is theirs.
	r1, err := f.received(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range warm.Events {
		for _, a := range f.apps {
			if err := a.LMCacheIndex.Apply(m, time.Now()); err != nil {
				return nil, fmt.Errorf("live: apply warm-up event %s: %w", m.Tag(), err)
			}
		}
	}
	r2, err := f.received(ctx)
	if err != nil {
		return nil, err
	}
	f.baseReceived += r2 - r1
	if err := f.dialGateways(log, opts.FailOpen); err != nil {
		return nil, err
	}
	if f.srv, f.url, err = gateway.ServeLoopback(f.front()); err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	return f, nil
}

func (f *liveFleet) close() {
	if f.srv != nil {
		_ = f.srv.Close()
	}
	f.closeGateways()
	for _, e := range f.engines {
		if err := e.Close(); err != nil {
			f.log.Error("live: close engine", "engine", e.Addr(), "err", err)
		}
	}
	f.closeApps()
	f.client.CloseIdleConnections()
}

// received is how many LMCache messages the picker's controller has taken in (every type
// and outcome), read from its /metrics.
func (f *liveFleet) received(ctx context.Context) (float64, error) {
	total := 0.0
	for _, a := range f.apps {
		m, err := scrape(ctx, f.client, "http://"+a.MetricsAddr()+"/metrics")
		if err != nil {
			return 0, fmt.Errorf("live: the picker's metrics: %w", err)
		}
		// Shared replicas each apply every message: the first one's count is the fleet's.
		total += m["loadaware_lmcache_messages_total"]
		if !f.naive {
			break
		}
	}
	return total, nil
}

// emitted is how many LMCache messages the engines have produced.
func (f *liveFleet) emitted() int64 {
	var n int64
	for _, e := range f.engines {
		n += e.Emitted()
	}
	return n
}

// poll calls done every few milliseconds until it reports true, fails, or ctx or the
// deadline ends. No signal exists for "the controller applied a message": the effect is
// watched.
func poll(ctx context.Context, limit time.Duration, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("live: %s after %v", what, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// awaitRegistered waits until the index knows every engine's instance by its IP: every
// replica's index when they share state (an engine registers with one replica, the others
// learn it over NATS), else the replicas' indexes together (naive replicas each know their
// own engines only).
func (f *liveFleet) awaitRegistered(ctx context.Context) error {
	groups := [][]*app.App{f.apps} // naive: the indexes together
	if len(f.apps) > 1 && !f.naive {
		groups = groups[:0]
		for _, a := range f.apps {
			groups = append(groups, []*app.App{a})
		}
	}
	return poll(ctx, 10*time.Second, "the engines' LMCache workers did not register", func() (bool, error) {
		for _, g := range groups {
			if !f.knowsEngines(g) {
				return false, nil
			}
		}
		return true, nil
	})
}

// knowsEngines reports whether the apps' indexes, together, hold every engine's instance,
// active, at its IP.
func (f *liveFleet) knowsEngines(apps []*app.App) bool {
	byID := map[string]lmcache.InstanceInfo{}
	for _, a := range apps {
		for _, in := range a.LMCacheIndex.Instances() {
			byID[in.ID] = in
		}
	}
	for _, e := range f.engines {
		in, ok := byID[e.InstanceID()]
		if !ok || in.State != lmcache.StateActive || in.IP != e.cfg.IP {
			return false
		}
	}
	return true
}

// awaitDelivered waits until the controller has received every message the engines produced.
func (f *liveFleet) awaitDelivered(ctx context.Context, limit time.Duration) (received float64, err error) {
	err = poll(ctx, limit, "LMCache messages did not all reach the picker", func() (bool, error) {
		want := f.emitted()
		got, err := f.received(ctx)
		received = got - f.baseReceived
		return received >= float64(want) && f.kvDelivered(), err
	})
	return received, err
}

// record is one request as the client saw it: its answer, and why it failed if it did.
type record struct {
	openai.Response
	err string
}

func (f *liveFleet) measure(ctx context.Context, cfg experiment.Config, arm experiment.Arm, seed uint64, reqs []workload.Request, opts Options) (Result, error) {
	res := Result{Decisions: map[int]string{}}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = reqs[len(reqs)-1].SendAt + 2*time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	before, err := f.engineCounters(ctx)
	if err != nil {
		return res, err
	}
	emittedBefore := f.emitted()
	receivedBefore, err := f.received(ctx)
	if err != nil {
		return res, err
	}
	receivedBefore -= f.baseReceived

	sentBefore := f.replicaSums(ctx, sentMetrics...)
	recs := make([]record, len(reqs))
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = fmt.Sprintf("live-%s-%d-%d", arm.Name, seed, r.Index)
	}
	start := time.Now()
	stop := make(chan struct{})
	var samples [][]int
	var sampleErr error
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		samples, sampleErr = f.sample(ctx, start, cfg.SampleInterval, stop)
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	finish := func() {
		if opts.Progress != nil {
			mu.Lock()
			done++
			opts.Progress(done, len(reqs))
			mu.Unlock()
		}
	}
	for i, r := range reqs {
		explain := opts.Explain != nil && opts.Explain(r.Index)
		id := ids[i]
		if opts.Sequential {
			if i > 0 {
				f.waitGateways()
				_, err := f.awaitDelivered(ctx, 10*time.Second)
				if err == nil {
					err = f.awaitReplicasSynced(ctx)
				}
				if err != nil {
					close(stop)
					<-sampled
					return res, err
				}
			}
			recs[i] = f.send(ctx, id, r, explain)
			finish()
			continue
		}
		if d := time.Until(start.Add(r.SendAt)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		if opts.KillAt > 0 && i == opts.KillAt && len(f.apps) > 1 {
			f.killLast()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs[i] = f.send(ctx, id, r, explain)
			finish()
		}()
	}
	close(stop)
	wg.Wait()
	<-sampled
	f.waitGateways()
	if sampleErr != nil {
		return res, sampleErr
	}
	received, err := f.awaitDelivered(context.WithoutCancel(ctx), 10*time.Second)
	if err != nil {
		return res, err
	}
	res.Messages = f.emitted() - emittedBefore // all of them reached the controller (awaitDelivered)
	res.Received = int64(received - receivedBefore)
	after, err := f.engineCounters(context.WithoutCancel(ctx))
	if err != nil {
		return res, err
	}
	inflight, err := scrape(context.WithoutCancel(ctx), f.client, "http://"+f.app.MetricsAddr()+"/metrics")
	if err != nil {
		return res, err
	}
	res.InFlightAfter = inflight["loadaware_inflight_requests"]

	run := experiment.Run{Arm: arm, Seed: seed, Interval: cfg.SampleInterval, Running: samples}
	f.mu.Lock()
	outcomes := f.outcomes
	f.outcomes = map[string]gateway.Outcome{}
	f.mu.Unlock()
	served := map[string]int{}
	for i, r := range reqs {
		row := rowOf(r, recs[i], start)
		row.Engine = outcomes[ids[i]].Endpoint
		served[row.Engine]++
		if d := recs[i].Header.Get("X-Loadaware-Decision"); d != "" {
			res.Decisions[r.Index] = d
		}
		run.Rows = append(run.Rows, row)
	}
	run.Span = experiment.Span(run.Rows)
	run.Window = run.Rows[len(run.Rows)-1].SendAt - run.Rows[0].SendAt
	for i, e := range f.engines {
		run.Engines = append(run.Engines, experiment.EngineStats{
			Addr:          e.Addr(),
			PrefixQueries: int64(after[i]["vllm:prefix_cache_queries_total"] - before[i]["vllm:prefix_cache_queries_total"]),
			PrefixHits:    int64(after[i]["vllm:prefix_cache_hits_total"] - before[i]["vllm:prefix_cache_hits_total"]),
			Preemptions:   int64(after[i]["vllm:num_preemptions_total"] - before[i]["vllm:num_preemptions_total"]),
			Requests:      served[e.Addr()],
		})
	}
	res.Run = run
	failed := make([]bool, len(reqs))
	for i, row := range run.Rows {
		failed[i] = row.Status != "ok"
	}
	res.Replicas = f.replicaStats(context.WithoutCancel(ctx), start, outcomes, ids, failed, sentBefore)
	return res, nil
}

// rowOf turns what the client saw into the per-request row virtual time writes.
func rowOf(r workload.Request, rec record, start time.Time) experiment.Row {
	toks := rec.Tokens
	row := experiment.Row{Index: r.Index, PrefixID: r.PrefixID, SendAt: rec.Sent.Sub(start).Seconds(), TTFT: math.NaN(), E2E: math.NaN(),
		PromptTokens: len(r.Tokens), CompletionTokens: len(toks), Status: "ok"}
	if len(toks) > 0 {
		row.TTFT = rec.TTFT().Seconds()
		row.E2E = toks[len(toks)-1].Sub(rec.Sent).Seconds()
		row.ITLs = make([]float64, len(toks)-1)
		for i, d := range rec.ITLs() {
			row.ITLs[i] = float64(d) / 1e6
		}
	}
	switch {
	case rec.err != "":
		row.Status, row.Error = "error", rec.err
	case rec.CompletionTokens >= 0 && rec.CompletionTokens != len(toks):
		row.Status, row.Error = "error", fmt.Sprintf("usage reports %d completion tokens, %d arrived", rec.CompletionTokens, len(toks))
	case len(toks) != r.MaxTokens:
		row.Status, row.Error = "error", fmt.Sprintf("%d of %d tokens arrived", len(toks), r.MaxTokens)
	}
	return row
}

// engineCounters scrapes every engine's /metrics.
func (f *liveFleet) engineCounters(ctx context.Context) ([]map[string]float64, error) {
	out := make([]map[string]float64, len(f.engines))
	for i, e := range f.engines {
		m, err := scrape(ctx, f.client, "http://"+e.Addr()+"/metrics")
		if err != nil {
			return nil, fmt.Errorf("live: engine %d: %w", i, err)
		}
		out[i] = m
	}
	return out, nil
}

// sample scrapes every engine's vllm:num_requests_running at start, start+interval, ...
// until stop closes (a sample time not reached by then is not taken).
func (f *liveFleet) sample(ctx context.Context, start time.Time, interval time.Duration, stop <-chan struct{}) ([][]int, error) {
	var out [][]int
	for k := 0; ; k++ {
		t := time.NewTimer(time.Until(start.Add(time.Duration(k) * interval)))
		select {
		case <-stop:
			t.Stop()
			return out, nil
		case <-ctx.Done():
			t.Stop()
			return out, nil
		case <-t.C:
		}
		row := make([]int, len(f.engines))
		errs := make([]error, len(f.engines))
		var wg sync.WaitGroup
		for i, e := range f.engines {
			wg.Go(func() {
				m, err := scrape(ctx, f.client, "http://"+e.Addr()+"/metrics")
				row[i], errs[i] = int(m["vllm:num_requests_running"]), err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			if ctx.Err() != nil {
				return out, nil
			}
			return nil, fmt.Errorf("live: sample the engines' running requests: %w", err)
		}
		out = append(out, row)
	}
}

// send posts one streamed completion with the prompt as token ids, through the gateway,
// and records when it was sent and when every token arrived.
func (f *liveFleet) send(ctx context.Context, id string, r workload.Request, explain bool) record {
	h := http.Header{"X-Request-Id": {id}}
	if explain {
		h.Set("X-Loadaware-Explain", "1")
	}
	c := openai.Client{HTTP: f.client, BaseURL: f.url}
	resp, err := c.Do(ctx, openai.Request{Model: DefaultModelName, Prompt: r.Tokens, MaxTokens: r.MaxTokens, Stream: true, Header: h})
	rec := record{Response: resp}
	if err != nil {
		rec.err = err.Error()
	}
	return rec
}

// scrape reads url (a /metrics endpoint) and sums its samples by metric name.
func scrape(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	p, err := promtext.Get(ctx, c, url)
	if err != nil {
		return nil, err
	}
	return p.Totals(), nil
}
