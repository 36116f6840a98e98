// Package vtime runs the benchmark in virtual time: the shipped picker (its
// scoring policies and fleet bookings) routes each generated request to one of
// several simulated vLLM engines (bench/sim), the engines' LMCache chunk
// events feed the cache index in-process, and a simulated clock advances from
// event to event. A sweep of 7 arms x 20 seeds x 500 requests takes seconds
// and is exactly repeatable: equal configs give equal results, whatever the
// number of workers.
//
// vtime opens no sockets and reads no wall clock for its results.
package vtime

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/peers/gie"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/bench/workload"
	"github.com/loadaware/loadaware-epp/enginemetrics"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/lora"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/scoring"
)

// RunSweep runs every arm on every seed, cfg.Workers at a time, and calls
// progress (if not nil) after each run with the runs done and the total.
// It stops early with ctx's error when ctx is cancelled.
func RunSweep(ctx context.Context, cfg experiment.Config, progress func(done, total int)) (experiment.Results, error) {
	pool, err := validPool(cfg)
	if err != nil {
		return experiment.Results{}, err
	}
	total := len(cfg.Arms) * len(cfg.Seeds)
	runs := make([]experiment.Run, total)
	var mu sync.Mutex
	done := 0
	tick := func() {
		mu.Lock()
		done++
		if progress != nil {
			progress(done, total)
		}
		mu.Unlock()
	}
	// A job is one run (per-seed protocol) or one arm's seeds in order on
	// one fleet (published protocol).
	njobs := total
	if cfg.Protocol == experiment.ProtocolPublished {
		njobs = len(cfg.Arms)
	}
	err = ForEach(ctx, njobs, cfg.Workers, func(j int) error {
		if cfg.Protocol == experiment.ProtocolPublished {
			return runArm(ctx, cfg, pool, j, runs[j*len(cfg.Seeds):(j+1)*len(cfg.Seeds)], tick)
		}
		arm, seed := cfg.Arms[j/len(cfg.Seeds)], cfg.Seeds[j%len(cfg.Seeds)]
		var err error
		runs[j], err = runOne(ctx, cfg, pool, arm, seed)
		tick()
		return err
	})
	if err != nil {
		return experiment.Results{}, err
	}
	return experiment.Results{Config: cfg, Runs: runs}, nil
}

// runArm runs arm a's seeds back to back on one warmed-up fleet into out
// (one run per seed, in cfg.Seeds order), calling tick after each.
func runArm(ctx context.Context, cfg experiment.Config, pool *workload.Pool, a int, out []experiment.Run, tick func()) error {
	arm := cfg.Arms[a]
	w, err := warmWorld(ctx, cfg, pool, arm, cfg.Seeds[0], false)
	if err != nil {
		return err
	}
	defer w.close()
	for i, seed := range cfg.Seeds {
		reqs, err := workload.Generate(cfg.Workload, pool, seed)
		if err != nil {
			return err
		}
		if out[i], err = w.measure(ctx, arm, seed, reqs); err != nil {
			return err
		}
		w.pause(cfg.SeedGap)
		tick()
	}
	return nil
}

// RunOne runs one arm on one seed.
func RunOne(ctx context.Context, cfg experiment.Config, arm experiment.Arm, seed uint64) (experiment.Run, error) {
	pool, err := validPool(cfg)
	if err != nil {
		return experiment.Run{}, err
	}
	return runOne(ctx, cfg, pool, arm, seed)
}

// RunRequests runs arm on reqs (in send order, SendAt from the seed's start)
// instead of the seed's generated workload; seed names the run and derives its
// warm-up. It is how a test gives virtual time and the live mode the very same
// requests with send times of its choosing.
func RunRequests(ctx context.Context, cfg experiment.Config, arm experiment.Arm, seed uint64, reqs []workload.Request) (experiment.Run, error) {
	if len(reqs) == 0 {
		return experiment.Run{}, errors.New("vtime: no requests to run: pass at least one")
	}
	pool, err := validPool(cfg)
	if err != nil {
		return experiment.Run{}, err
	}
	w, err := warmWorld(ctx, cfg, pool, arm, seed, false)
	if err != nil {
		return experiment.Run{}, err
	}
	defer w.close()
	return w.measure(ctx, arm, seed, reqs)
}

// WarmUp runs the warm-up RunOne runs before measuring arm on seed
// (cfg.Warmup requests through the real picker, then one idle second) and
// returns the fleet it leaves: what the live mode starts its engines and its
// index from. With cfg.Warmup 0 the engines are new and idle at time 0.
func WarmUp(ctx context.Context, cfg experiment.Config, arm experiment.Arm, seed uint64) (experiment.Warm, error) {
	pool, err := validPool(cfg)
	if err != nil {
		return experiment.Warm{}, err
	}
	if cfg.DPRanks > 1 {
		return experiment.Warm{}, fmt.Errorf("vtime: %d data-parallel ranks per engine: only virtual time runs them, the live mode's engines have none", cfg.DPRanks)
	}
	w, err := warmWorld(ctx, cfg, pool, arm, seed, true)
	if err != nil {
		return experiment.Warm{}, err
	}
	defer w.close()
	engines := make([]*sim.Engine, len(w.engines))
	for i, e := range w.engines {
		engines[i] = e.Ranks()[0]
	}
	return experiment.Warm{Engines: engines, Now: w.now, Events: w.log}, nil
}

// validPool checks cfg and builds its workload's prefix pool.
func validPool(cfg experiment.Config) (*workload.Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return workload.NewPool(cfg.Workload)
}

// warmupSeed derives the warm-up workload's seed from the measured seed, so
// each seed has its own history and no seed's requests repeat in its warm-up.
func warmupSeed(seed uint64) uint64 { return seed ^ 0x5741524d55505f31 }

// epoch is virtual time zero as the picker's clock shows it.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func hasherFor(cfg experiment.Config) (*lmcache.Hasher, error) {
	h, err := lmcache.NewHasher(lmcache.KeyConfig{HashSeed: cfg.HashSeed, ChunkSize: cfg.Engine.ChunkSize})
	if err != nil {
		return nil, fmt.Errorf("vtime: LMCache hash seed and chunk size: %w", err)
	}
	return h, nil
}

func runOne(ctx context.Context, cfg experiment.Config, pool *workload.Pool, arm experiment.Arm, seed uint64) (experiment.Run, error) {
	w, err := warmWorld(ctx, cfg, pool, arm, seed, false)
	if err != nil {
		return experiment.Run{}, err
	}
	defer w.close()
	reqs, err := workload.Generate(cfg.Workload, pool, seed)
	if err != nil {
		return experiment.Run{}, err
	}
	return w.measure(ctx, arm, seed, reqs)
}

// warmWorld builds a run's world and plays the seed's warm-up through it.
// With record, the world keeps every LMCache event the index applies.
// The caller closes the world it returns.
func warmWorld(ctx context.Context, cfg experiment.Config, pool *workload.Pool, arm experiment.Arm, seed uint64, record bool) (_ *world, err error) {
	hasher, err := hasherFor(cfg)
	if err != nil {
		return nil, err
	}
	w := &world{cfg: cfg, addrs: experiment.Addrs(cfg.Engines), hasher: hasher, record: record, router: cfg.Router}
	if err := w.build(arm, seed); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if cfg.Protocol == experiment.ProtocolPublished {
		if err := w.publishedWarmup(ctx, pool); err != nil {
			return nil, err
		}
		// The seeds that ran before this one on the same engines.
		for _, s := range cfg.Seeds {
			if s == seed {
				break
			}
			reqs, err := workload.Generate(cfg.Workload, pool, s)
			if err != nil {
				return nil, err
			}
			if err := w.play(ctx, reqs, false); err != nil {
				return nil, err
			}
			w.pause(cfg.SeedGap)
		}
		return w, nil
	}
	if cfg.Warmup > 0 {
		wcfg := cfg.Workload
		wcfg.Requests = cfg.Warmup
		reqs, err := workload.Generate(wcfg, pool, warmupSeed(seed))
		if err != nil {
			return nil, err
		}
		if err := w.play(ctx, reqs, false); err != nil {
			return nil, err
		}
		w.now += time.Second // idle gap between warm-up and the measured seed
	}
	return w, nil
}

// publishedWarmup plays the published warm-up on the world's fleet: the
// passes over the prefix pool in prefix order, WarmupInFlight requests at a
// time (each batch sent together once the previous one has finished), then
// the seed gap. A workload without a prefix pool has nothing to warm.
func (w *world) publishedWarmup(ctx context.Context, pool *workload.Pool) error {
	if !w.cfg.Workload.HasPool() {
		return nil
	}
	for pass := range workload.WarmupPasses {
		reqs, err := workload.Warmup(w.cfg.Workload, pool, pass)
		if err != nil {
			return err
		}
		for i := 0; i < len(reqs); i += workload.WarmupInFlight {
			if err := w.play(ctx, reqs[i:min(i+workload.WarmupInFlight, len(reqs))], false); err != nil {
				return err
			}
		}
	}
	w.pause(w.cfg.SeedGap)
	return nil
}

// measure plays the measured requests and returns the run.
func (w *world) measure(ctx context.Context, arm experiment.Arm, seed uint64, reqs []workload.Request) (experiment.Run, error) {
	before := w.engineStats()
	if err := w.play(ctx, reqs, true); err != nil {
		return experiment.Run{}, err
	}
	return w.result(arm, seed, reqs, before), nil
}

// world is one run's fleet, picker, index and clock.
type world struct {
	cfg     experiment.Config
	addrs   []string
	hasher  *lmcache.Hasher
	engines []*sim.DP      // one per address: its data-parallel ranks (one without DPRanks)
	ranks   int            // the ranks the picker tells apart (arm.Ranks: DPRanks); 0: none
	picker  *picker.Picker // nil for the gie arm
	// replicas are the picker replicas routing in turn (Config.Pickers), replicas[0]
	// being picker on fleet; sent counts the requests they routed.
	replicas []replica
	sent     int
	gie      *gieArm     // the gie arm's router, else nil
	scr      *scrapeGrid // the engines' metrics as scraped, when the router reads them; else nil
	fleet    *fleet.Set
	index    *lmcache.Index
	now      time.Duration
	// adapters is what the engines' vllm:lora_requests_info said at the last scrape
	// (scrapeGrid), for the arms that weigh adapter residency; nil otherwise.
	adapters *lora.Table

	events  eventQueue
	seq     uint64
	pending []*pending // measured requests, by index
	samples [][]int
	served  []int
	owners  map[*sim.Request]*pending
	record  bool              // keep the LMCache events in log
	log     []lmcache.Message // the events the index applied, when record

	router experiment.Router
	policy string
	firsts []firstTokens // per engine, every request's first token so far
	// lastDelivery is when the client received the last token of any
	// request so far (engine token time plus the response leg).
	lastDelivery time.Duration
	kv           *kvSource // the engines' caches as vLLM KV events, when the picker reads them
	grid         *grid     // cell-wide sampling, when running a cell
	fallback     struct {
		addr string        // where the last group of unheld prompts went
		at   time.Duration // when that group's first prompt was routed
	}
}

type pending struct {
	req     workload.Request
	replica int // the picker replica that routed it
	sent    time.Duration
	engine  int
	booking *fleet.Booking // nil until the router's statistics show the request
	hook    fleet.Hook     // the booking's hook while the statistics lag, moved to the booking made after it
	sim     sim.Request
	errText string

	decoding, released bool // reached before the booking was made
}

// decode marks the booking decoding (at once, or when it is made).
func (p *pending) decode() {
	p.decoding = true
	if p.booking != nil {
		p.booking.Decoding()
	}
}

// release ends the booking (at once, or as soon as it is made).
func (p *pending) release() {
	p.released = true
	if p.booking != nil {
		p.booking.Release()
	}
}

// book makes the booking the router's statistics show from now on.
func (w *world) book(p *pending) error {
	b, err := w.replicas[p.replica].fleet.Book(w.addrs[p.engine])
	if err != nil {
		return fmt.Errorf("vtime: book %s: %w", w.addrs[p.engine], err)
	}
	p.booking = b
	if p.sim.PinRank > 0 && w.ranks > 1 {
		if err := b.Pin(p.sim.PinRank-1, w.ranks); err != nil {
			return fmt.Errorf("vtime: book %s: %w", w.addrs[p.engine], err)
		}
	}
	if p.hook != nil {
		b.SetHook(p.hook)
		p.hook = nil
	}
	if p.decoding {
		b.Decoding()
	}
	if p.released {
		b.Release()
	}
	return nil
}

// close stops the gie arm's background goroutines, if any.
func (w *world) close() {
	if w.gie != nil {
		w.gie.p.Close()
	}
}

// build makes the world's fleet, index, router and engines for arm; seed
// seeds the gie arm's tie-break.
func (w *world) build(arm experiment.Arm, seed uint64) error {
	newSet := func() *fleet.Set {
		set := fleet.New()
		set.Update(w.addrs)
		set.SetClock(func() time.Time { return epoch.Add(w.now) })
		return set
	}
	w.fleet = newSet()
	ix, err := lmcache.NewIndex(lmcache.IndexConfig{Keys: w.hasher.Config()})
	if err != nil {
		return fmt.Errorf("vtime: lmcache index: %w", err)
	}
	if err := register(ix, w.addrs, epoch.Add(w.now)); err != nil {
		return err
	}
	w.index = ix
	if w.kv, err = newKVSource(w.cfg.CacheSource, w.cfg.Engine.ChunkSize); err != nil {
		return err
	}
	w.policy = arm.Policy
	if w.ranks = 0; arm.Ranks {
		w.ranks = w.cfg.DPRanks
	}
	if arm.Policy == experiment.PolicyGIE {
		gc := gie.Config{Seed: seed}
		if arm.Residency {
			gc.PickerConfig = gieLoRAConfig
		}
		g, err := gie.New(w.addrs, gc)
		if err != nil {
			return fmt.Errorf("vtime: arm %s: %w", arm.Name, err)
		}
		w.gie = &gieArm{p: g, seen: make(map[string]gie.Metrics, len(w.addrs))}
		w.scr = newScrapeGrid(len(w.addrs))
	} else {
		params := scoring.DefaultParams()
		params.Beta = arm.Beta
		opts := picker.Options{
			Policy:      arm.Policy,
			Params:      params,
			Cache:       w.cacheView(w.cfg.CacheSource),
			BaseModels:  []string{baseModel},
			Now:         func() time.Time { return epoch.Add(w.now) },
			Engines:     engineView{w},
			RankMetrics: arm.ScrapedRanks,
		}
		w.adapters = nil
		if arm.Residency {
			w.adapters = &lora.Table{}
			opts.Adapters, opts.AdapterCost = w.adapters, w.cfg.AdapterCost
		}
		w.replicas = nil
		for r := range max(w.cfg.Pickers, 1) {
			if opts.Fleet = w.fleet; r > 0 {
				opts.Fleet = newSet()
			}
			p, err := picker.New(opts)
			if err != nil {
				return fmt.Errorf("vtime: arm %s: %w", arm.Name, err)
			}
			w.replicas = append(w.replicas, replica{p, opts.Fleet})
		}
		w.picker = w.replicas[0].picker
		if w.picker.NeedsEngineMetrics() || arm.Residency {
			w.scr = newScrapeGrid(len(w.addrs))
		}
	}
	for i := range w.addrs {
		e, err := sim.NewDP(w.cfg.EngineConfig(i), w.hasher.ChunkKeys, max(w.cfg.DPRanks, 1))
		if err != nil {
			return err
		}
		w.engines = append(w.engines, e)
	}
	w.served = make([]int, len(w.addrs))
	w.firsts = make([]firstTokens, len(w.addrs))
	w.owners = make(map[*sim.Request]*pending)
	return nil
}

type eventKind int

const (
	evSend eventKind = iota
	evArrive
	evStep
	evSample
	evGrid
	evBook
	evScrape
)

type event struct {
	at   time.Duration
	seq  uint64
	kind eventKind
	p    *pending // send, arrive
	eng  int      // step
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (w *world) push(e event) {
	w.seq++
	e.seq = w.seq
	heap.Push(&w.events, e)
}

// play sends reqs (SendAt relative to the current time) and runs until every
// request has finished. With measure, it keeps the requests and samples the
// engines' running counts over the send window.
func (w *world) play(ctx context.Context, reqs []workload.Request, measure bool) error {
	start := w.now
	ps := make([]*pending, len(reqs))
	for i, r := range reqs {
		ps[i] = &pending{req: r, sent: start + r.SendAt, engine: -1}
		w.push(event{at: ps[i].sent, kind: evSend, p: ps[i]})
	}
	var windowEnd time.Duration
	if measure {
		w.pending = ps
		w.samples = nil // a new slice: the runs already returned keep theirs
		windowEnd = start + reqs[len(reqs)-1].SendAt
		w.push(event{at: start, kind: evSample})
	}
	open := len(reqs)
	for n := 0; w.events.Len() > 0; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		ev := heap.Pop(&w.events).(event)
		w.now = ev.at
		switch ev.kind {
		case evSend:
			if err := w.send(ctx, ev.p); err != nil {
				return err
			}
			if ev.p.engine < 0 {
				open--
			}
		case evArrive:
			e := w.engines[ev.p.engine]
			if err := e.Add(&ev.p.sim); err != nil {
				ev.p.errText = err.Error()
				ev.p.release()
				open--
				if w.gie != nil {
					if err := w.gieDone(ev.p.sim.ID); err != nil {
						return err
					}
				}
				continue
			}
			w.kick(ev.p.engine)
		case evBook:
			if err := w.book(ev.p); err != nil {
				return err
			}
		case evStep:
			n, err := w.finishStep(ev.eng)
			if err != nil {
				return err
			}
			open -= n
			w.kick(ev.eng)
		case evScrape:
			w.onScrape(open)
		case evGrid:
			if w.grid != nil {
				w.onGrid()
			}
		case evSample:
			row := make([]int, len(w.engines))
			for i, e := range w.engines {
				row[i] = e.Metrics().Running
			}
			w.samples = append(w.samples, row)
			if next := ev.at + w.cfg.SampleInterval; next <= windowEnd {
				w.push(event{at: next, kind: evSample})
			}
		}
		if open == 0 && !w.anyBusy() {
			// Drain sample events past the window, if any remain.
			w.events = w.events[:0]
			if w.scr != nil {
				w.scr.due = false
			}
		}
	}
	return nil
}

func (w *world) anyBusy() bool {
	for _, e := range w.engines {
		if _, busy := e.Busy(); busy {
			return true
		}
	}
	return false
}

func (w *world) send(ctx context.Context, p *pending) error {
	if w.gie != nil {
		addr, err := w.pickGIE(p)
		if err != nil {
			p.errText = err.Error()
			return nil
		}
		return w.dispatch(p, addr, nil, 0)
	}
	preq := picker.Request{
		RequestID: requestID(p),
		Path:      "/v1/completions",
		Model:     modelOf(p.req),
		Tokens:    p.req.Tokens,
		Prompt:    p.req.Text,
	}
	if w.scr != nil {
		w.scrapeBeforePick()
	}
	stale, unheld := w.staleFallback(ctx, p.req.Tokens)
	if stale != "" {
		preq.Subset = []string{stale}
	}
	p.replica = w.sent % len(w.replicas)
	w.sent++
	r := w.replicas[p.replica]
	w.shareLoads(r.fleet)
	d, err := r.picker.Pick(ctx, preq)
	if err != nil {
		p.errText = err.Error()
		return nil
	}
	if PickSeen != nil && w.grid != nil {
		w.pickSeen(p, &d)
	}
	if unheld && stale == "" {
		w.fallback.addr, w.fallback.at = d.Endpoints[0], w.now
	}
	return w.dispatch(p, d.Endpoints[0], d.Booking, d.PinRank)
}

// replica is one picker replica and the fleet it books on.
type replica struct {
	picker *picker.Picker
	fleet  *fleet.Set
}

// shareLoads sets on set, as its remote load, what the other replicas have in flight on
// each endpoint now: the replicas' gossip, instantaneous. Per-rank bookings are not
// shared (the replicas publish endpoint loads only).
func (w *world) shareLoads(set *fleet.Set) {
	if len(w.replicas) < 2 {
		return
	}
	for _, a := range w.addrs {
		var rp, rd int
		for _, r := range w.replicas {
			if r.fleet != set {
				l := r.fleet.LocalLoads([]string{a})[0]
				rp, rd = rp+l.Prefill, rd+l.Decode
			}
		}
		set.SetRemote(a, rp, rd)
	}
}

// dispatch sends p to the engine at addr, pinned to data-parallel rank
// pin-1 (0: none); booking is our picker's booking for it (nil for the gie
// arm, which keeps its own per-request state).
func (w *world) dispatch(p *pending, addr string, booking *fleet.Booking, pin int) error {
	eng := -1
	for i, a := range w.addrs {
		if a == addr {
			eng = i
		}
	}
	if eng < 0 {
		if booking != nil {
			booking.Release()
		}
		return fmt.Errorf("vtime: arm %s chose %s, which is not a simulated engine", w.policy, addr)
	}
	p.engine = eng
	p.booking = booking
	if booking != nil && w.router.StatsLag > 0 {
		// The published router counts the request only once its lookup has
		// returned: decisions within the lag do not see it. A peer's own
		// account of its requests (the booking's hook) is kept at once, as
		// the peer keeps it when it routes: it moves to the later booking.
		p.hook = booking.TakeHook()
		booking.Release()
		p.booking = nil
		w.push(event{at: w.now + w.router.StatsLag, kind: evBook, p: p})
	}
	p.sim = sim.Request{ID: requestID(p), Tokens: p.req.Tokens, MaxTokens: p.req.MaxTokens, Adapter: p.req.Adapter, PinRank: pin}
	if w.kv != nil {
		w.kv.learn(p.req.Tokens, w.hasher.ChunkKeys(p.req.Tokens))
	}
	w.owners[&p.sim] = p
	w.served[eng]++
	w.push(event{at: w.now + w.cfg.Router.RequestLatency + w.cfg.Engine.IngressLatency, kind: evArrive, p: p})
	return nil
}

// kick starts a step on an idle engine that has work.
func (w *world) kick(i int) {
	for {
		end, ok := w.engines[i].Start(w.now)
		if !ok {
			return
		}
		w.push(event{at: end, kind: evStep, eng: i})
	}
}

// finishStep applies engine i's step: first tokens move bookings to decode,
// last tokens release them, and the chunk events reach the index. It returns
// how many requests finished.
func (w *world) finishStep(i int) (int, error) {
	out := w.engines[i].Finish()
	at := epoch.Add(w.now)
	if w.kv != nil {
		w.kv.apply(w.addrs[i], w.streamRank(out.Rank), out.KV)
	}
	for _, ev := range out.KV {
		var msg lmcache.Message = lmcache.KVAdmitMsg{InstanceID: experiment.InstanceID(i), Key: ev.Key, Location: experiment.Location}
		if !ev.Admit {
			msg = lmcache.KVEvictMsg{InstanceID: experiment.InstanceID(i), Key: ev.Key, Location: experiment.Location}
		}
		if err := w.index.Apply(msg, at); err != nil {
			return 0, fmt.Errorf("vtime: engine %s: apply %s: %w", w.addrs[i], msg.Tag(), err)
		}
		if w.record {
			w.log = append(w.log, msg)
		}
	}
	for _, r := range out.Tokens {
		if len(r.TokenTimes) == 1 {
			w.owners[r].decode()
			arrived := w.owners[r].sent + w.cfg.Router.RequestLatency + w.cfg.Engine.IngressLatency
			f := &w.firsts[i]
			f.n++
			f.ttft += (r.TokenTimes[0] - arrived).Seconds()
			f.prefill += (r.TokenTimes[0] - r.AdmittedAt).Seconds()
		}
	}
	for _, r := range out.Finished {
		// vLLM observes a request's prefill time and computed tokens when it finishes.
		f := &w.firsts[i]
		f.finished.Count++
		f.finished.Seconds += (r.TokenTimes[0] - r.AdmittedAt).Seconds()
		f.finished.Computed += float64(len(r.Tokens) - r.CachedTokens - r.LoadedTokens)
		w.lastDelivery = max(w.lastDelivery, r.TokenTimes[len(r.TokenTimes)-1]+w.cfg.Router.ResponseLatency)
		w.owners[r].release()
		delete(w.owners, r)
		if w.gie != nil {
			if err := w.gieDone(r.ID); err != nil {
				return 0, err
			}
		}
	}
	return len(out.Finished), nil
}

// baseModel is the served model name of the simulated engines: a request for
// an adapter names the adapter instead (vLLM's OpenAI server resolves "model").
const baseModel = "sim"

// modelOf is the "model" r is sent with.
func modelOf(r workload.Request) string {
	if r.Adapter != "" {
		return r.Adapter
	}
	return baseModel
}

// pause idles the fleet for gap after the client has received every
// response: the driver starts its next seed gap after the last completion
// it saw.
func (w *world) pause(gap time.Duration) {
	w.now = max(w.now, w.lastDelivery) + gap
}

// firstTokens counts one engine's first tokens as vLLM's TTFT and prefill-time
// histograms do (count and sums), and its finished requests' prefill counters as vLLM
// exports them (observed at the finish; the prompt tokens computed are neither cached
// nor loaded).
type firstTokens struct {
	n             int64
	ttft, prefill float64
	finished      enginemetrics.PrefillCounters
}

func (w *world) engineStats() []experiment.EngineStats {
	out := make([]experiment.EngineStats, len(w.engines))
	for i, e := range w.engines {
		m := e.Metrics()
		out[i] = experiment.EngineStats{Addr: w.addrs[i], PrefixQueries: m.PrefixQueries, PrefixHits: m.PrefixHits, Preemptions: m.Preemptions, Requests: w.served[i]}
	}
	return out
}
