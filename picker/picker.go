// Package picker is the decision engine: it turns a parsed request into a ranked endpoint
// list and books the winner.
//
// Pick gathers the signals (token ids, cache matches, loads), runs the configured scoring
// policy and books one in-flight request on the first-ranked endpoint. Slow work
// (tokenizing, cache lookups) happens before the critical section; the load snapshot, the
// ranking and the booking of one decision happen under one lock, so concurrent decisions
// never see the same stale loads and herd onto one endpoint. picker knows nothing of
// Envoy or HTTP.
package picker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/internal/threadcpu"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/lora"
	"github.com/loadaware/loadaware-epp/ratelog"
	"github.com/loadaware/loadaware-epp/scoring"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxPromptBytes is the largest prompt tokenized by default: a 32k-token context is
// about 128 KiB of text. BenchmarkWorstCasePrompt measures the worst shape (one run of
// whitespace) at about 0.2 us per byte, linear, and ordinary text at 5-6 ns per byte, so
// 256 KiB bounds one tokenization to about 50 ms of CPU (decision 0709).
const DefaultMaxPromptBytes = 256 << 10

// LargePromptBytes is the size from which a text or chat prompt takes one of the
// Options.LargeTokenizations slots: 32 KiB is about 8k tokens of ordinary text (0.4 ms to
// tokenize) and at most 7 ms of the worst shape.
const LargePromptBytes = 32 << 10

// Errors Pick returns when it cannot route. Callers map them to 503.
var (
	ErrNoEndpoints     = errors.New("no endpoints are known yet: pass --endpoints ip:port,... or check discovery (--pool-name)")
	ErrSubsetEmpty     = errors.New("the gateway's subset hint (envoy.lb.subset_hint) is present but empty")
	ErrSubsetUnmatched = errors.New("no endpoint in the gateway's subset hint is in the endpoint set")
)

// KeptRanked is how many of the best candidates a Decision keeps, at least, when the
// request asked for no explanation: the routing answer's metadata lists the scores of at
// most this many (extproc.MaxScored). An explanation (Request.Explain) keeps 32.
const KeptRanked = 8

// Request is what the picker needs of one HTTP request.
type Request struct {
	RequestID string
	Path      string   // "/v1/completions", "/v1/chat/completions", or other
	Model     string   // the body's "model"; a LoRA adapter's name when it is not a base model (Options.BaseModels)
	CacheSalt string   // the body's "cache_salt"; empty: none
	Tokens    []uint32 // prompt token ids when the client sent ids (skips tokenizing); read them only until Pick returns (extproc reuses the array)
	Prompt    string   // completion prompt text
	ChatBody  []byte   // raw chat request body, for chat requests; read it only until Pick returns (extproc reuses its bytes)
	Session   string   // value of the session header
	Subset    []string // the gateway's subset hint; nil when absent
	Explain   bool     // the caller will render Decision.Explain: keep the 32 best, not KeptRanked
}

// Decision is the outcome of one Pick.
type Decision struct {
	Endpoints    []string         // ordered, best first; at most MaxEndpoints
	Ranked       []scoring.Ranked // the best candidates, best first: as many as MaxEndpoints or, whichever is more, an explanation lists (32) when the request asked for one (Request.Explain), else KeptRanked; in order unless two or more bookings failed (endpoints leaving during the decision), when the last may not be
	Candidates   int              // candidates ranked (Ranked holds the first of them)
	Policy       string
	Beta         float64
	PromptTokens int
	Tokens       string            // where the token ids came from: "request", "tokenizer", "none", or "not-needed" (the policy ignores prompts)
	Note         string            // why the decision had less information than usual, if it did
	Sources      map[string]string // endpoint -> the cache source of its match, for the endpoints of Ranked matched by a named source; filled only for its readers, the explanation (Request.Explain) and the debug log, else empty
	Booking      *fleet.Booking
	// PinRank is 1 + the data-parallel rank behind the winner the request should be
	// pinned to (vLLM's x-data-parallel-rank): the holder of the credited prefix unless it
	// is loaded past RankSlack over the least loaded rank, then that one (RankedView);
	// 0: none (the cache view tells no ranks apart). The booking is counted on it. See Rank.
	PinRank int
}

// Rank is the data-parallel rank to pin the request to, if any (PinRank).
func (d *Decision) Rank() (int, bool) { return d.PinRank - 1, d.PinRank > 0 }

// CacheMatch is how much of a prompt one endpoint holds.
type CacheMatch struct {
	Matched    int    // contiguous prefix, in tokens
	HolderRank int    // order in which it stored the prompt's first chunk; -1 if it did not
	Source     string // the cache source that matched ("lmcache", "vllm-events"); "" when unnamed
	// PinRank is 1 + the data-parallel rank behind the endpoint that holds Matched, for a
	// view that tells an endpoint's ranks apart (KVEventsView.Ranks > 1); 0: not known.
	PinRank int
}

// CacheView reports, for a prompt's token ids, what each endpoint holds.
type CacheView interface {
	// Match returns one CacheMatch per endpoint, aligned with endpoints. The slice may
	// be the fleet's own: it must not be modified.
	Match(ctx context.Context, tokens []uint32, endpoints []string) ([]CacheMatch, error)
}

// NoCache is the cache view with no information: nothing is held anywhere.
type NoCache struct{}

// Match implements CacheView.
func (NoCache) Match(_ context.Context, _ []uint32, endpoints []string) ([]CacheMatch, error) {
	out := make([]CacheMatch, len(endpoints))
	for i := range out {
		out[i].HolderRank = -1
	}
	return out, nil
}

// Tokenizer turns a request's prompt (Prompt or ChatBody) into the token ids the engines
// will compute. endpoints are the request's candidates, for tokenizers that ask an engine;
// the slice may be the fleet's own and must not be modified.
// An error says why the ids cannot be had; the picker then routes on load alone.
type Tokenizer interface {
	Tokenize(ctx context.Context, r Request, endpoints []string) ([]uint32, error)
}

// Observer is told of every booked decision that had token ids (e.g. the LMCache
// silent-miss detector). It must be fast and must not block.
type Observer interface {
	Routed(endpoint string, tokens []uint32)
}

// HealthView narrows candidates to the endpoints healthy at now (fleet.Health). When none
// is healthy it returns them all and false. It must not modify addrs (it may be the
// fleet's own slice) and must keep their order.
type HealthView interface {
	Usable(addrs []string, now time.Time) ([]string, bool)
}

// UnhealthyLister is a HealthView that also lists the endpoints unusable at now, sorted
// (fleet.Health does). Over the whole view, the picker then keeps the view less those for
// the decisions that follow while neither changes, instead of asking Usable each time.
type UnhealthyLister interface {
	Unhealthy(now time.Time) []string
}

// EngineView reports an endpoint's vLLM metrics as last scraped, aged at now
// (enginemetrics.Scraper). It must be fast and safe for concurrent use.
type EngineView interface {
	Engine(addr string, now time.Time) scoring.EngineMetrics
}

// Options configure a Picker.
type Options struct {
	Fleet        *fleet.Set
	Policy       string         // default "loadaware"
	Params       scoring.Params // use scoring.DefaultParams() as the base
	Cache        CacheView      // nil: NoCache
	Tokenizer    Tokenizer      // nil: text and chat prompts are routed on load alone
	Observer     Observer       // nil: none
	Health       HealthView     // nil: every endpoint is a candidate
	MaxEndpoints int            // length of the fallback list; default 1
	// BaseModels are the engines' served model names. A request whose Model is none of
	// them names a LoRA adapter (as vLLM resolves it) and is matched only against that
	// adapter's blocks (KeyedView). Empty: every request is for the base model.
	BaseModels []string
	// Adapters, when set, says which LoRA adapters each endpoint runs (lora.Table); a
	// request for an adapter then counts AdapterCost more requests in flight on the
	// endpoints that would have to load it. nil: adapters are not weighed.
	Adapters    AdapterView
	AdapterCost AdapterCost
	// MaxPromptBytes bounds the text or chat body handed to the Tokenizer; a larger prompt
	// is routed on load alone (noted, counted). 0 means DefaultMaxPromptBytes; negative
	// means no bound.
	MaxPromptBytes int
	// LargeTokenizations bounds how many prompts over LargePromptBytes are tokenized at
	// once; a large prompt that finds every slot taken is routed on load alone (noted,
	// counted as "<kind>-tokenizer-busy") instead of waiting. A run of pathological
	// prompts (the worst shape costs about 0.3 us per byte, 0.09 s at the byte bound) can
	// then hold at most this many cores, and small prompts never wait for them. 0 means
	// max(1, GOMAXPROCS/2); negative means no bound.
	LargeTokenizations int
	// LargeTokenizeCPU is the share of one CPU the tokenizations of prompts over
	// LargePromptBytes may use on average, all together: each is charged the CPU time it
	// took of its thread, and while that exceeds the budget (the bucket is in debt) a large
	// prompt is routed on load alone (noted, counted as "<kind>-tokenizer-over-budget")
	// as when every slot is taken. Prompts under LargePromptBytes are never charged. 0
	// means DefaultLargeTokenizeCPU; negative means no budget.
	LargeTokenizeCPU float64
	// LargeTokenizeBurst is the CPU time large tokenizations may use at once above
	// LargeTokenizeCPU; 0 means DefaultLargeTokenizeBurst.
	LargeTokenizeBurst time.Duration
	Now                func() time.Time
	Logger             *slog.Logger
	Registerer         prometheus.Registerer // nil: metrics are not registered

	// Engines gives each candidate's scraped vLLM metrics to the policies that read them
	// (scoring.NeedsEngineMetrics); nil: they see none (scoring.EngineMetrics's zero value).
	Engines EngineView
	// RankMetrics has the rank choice weigh the ranks' scraped loads too, when Engines is
	// a RankEngineView and the cache view tells ranks apart: each rank's load is then this
	// picker's bookings plus the scrape's requests beyond them (rankPicker.choose). Off,
	// the bookings alone (decision 0831: in virtual time the scrape cost TTFT p95).
	RankMetrics bool
}

// AdapterView tells what an endpoint's adapter slots mean for a request for adapter
// (lora.Table does, from vLLM's vllm:lora_requests_info).
type AdapterView interface {
	State(endpoint, adapter string) lora.State
}

// AdapterCost is the residency term: how many requests in flight (in prefill) an
// endpoint's load counts extra for a request whose adapter it is not running, when it
// has a free adapter slot (the adapter is activated first) and when every slot is taken
// (the request waits until one adapter's requests have all finished). An endpoint
// running the adapter, or of unknown state, counts none. The zero AdapterCost turns the
// term off.
type AdapterCost struct {
	FreeSlot, SlotsFull int
}

// DefaultAdapterCost is the residency term the lora tournament profile chose
// (docs/decisions/0820).
var DefaultAdapterCost = AdapterCost{FreeSlot: 4, SlotsFull: 16}

// Config is the part of the configuration that can change at run time.
type Config struct {
	Policy string  `json:"policy"`
	Beta   float64 `json:"beta"`
}

type active struct {
	cfg       Config
	params    scoring.Params
	policy    scoring.Policy
	needs     scoring.Needs
	tokenless scoring.TokenlessRanker // nil: Rank also ranks requests without token ids
	leaders   scoring.LeaderRanker    // nil: the policy ranks every candidate
}

// Picker makes routing decisions. It is safe for concurrent use.
type Picker struct {
	opts    Options
	state   *scoring.State
	active  atomic.Pointer[active]
	decide  sync.Mutex // held for load snapshot + rank + book
	metrics *metrics
	source  string          // the cache view's name, for the cache-share metrics
	base    map[string]bool // Options.BaseModels
	scratch sync.Pool       // *pickScratch, for the work before the lock
	ranking rankScratch     // guarded by decide
	usable  atomic.Pointer[usableView]
	ledger  *ledger     // requests in flight with their sizes, for the policies that read them
	ranks   *rankPicker // the data-parallel ranks behind each endpoint (RankedView); nil: none

	largeSlots chan struct{} // one token per large prompt being tokenized; nil: no bound
	largeCPU   *largeBudget  // the large tokenizations' CPU budget; nil: none
	largeLog   *ratelog.Limiter
}

// New checks opts and returns a Picker.
func New(opts Options) (*Picker, error) {
	if opts.Fleet == nil {
		return nil, errors.New("picker: Options.Fleet is nil")
	}
	if opts.Policy == "" {
		opts.Policy = "loadaware"
	}
	if opts.Params == (scoring.Params{}) {
		opts.Params = scoring.DefaultParams()
	}
	if opts.Cache == nil {
		opts.Cache = NoCache{}
	}
	if opts.MaxPromptBytes == 0 {
		opts.MaxPromptBytes = DefaultMaxPromptBytes
	}
	if opts.MaxEndpoints < 1 {
		opts.MaxEndpoints = 1
	}
	if opts.LargeTokenizations == 0 {
		opts.LargeTokenizations = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if opts.LargeTokenizeCPU == 0 {
		opts.LargeTokenizeCPU = DefaultLargeTokenizeCPU
	}
	if opts.LargeTokenizeBurst <= 0 {
		opts.LargeTokenizeBurst = DefaultLargeTokenizeBurst
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Picker{opts: opts, state: scoring.NewState(), metrics: m, source: cacheSource(opts.Cache), base: baseModels(opts.BaseModels), ledger: newLedger()}
	if opts.LargeTokenizations > 0 {
		p.largeSlots = make(chan struct{}, opts.LargeTokenizations)
	}
	p.largeCPU = newLargeBudget(opts.LargeTokenizeCPU, opts.LargeTokenizeBurst, opts.Now())
	p.largeLog = ratelog.New(time.Minute)
	p.scratch.New = func() any { return new(pickScratch) }
	if n := dpRanks(opts.Cache); n > 1 {
		p.ranks = &rankPicker{n: n}
		if opts.RankMetrics {
			p.ranks.scraped, _ = opts.Engines.(RankEngineView)
		}
	}
	if err := p.SetConfig(Config{Policy: opts.Policy, Beta: opts.Params.Beta}); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the policy and beta in force.
func (p *Picker) Config() Config { return p.active.Load().cfg }

// SetConfig validates and switches the policy and beta; decisions after it returns use
// them. Routing history (round-robin position, request rates) carries over.
func (p *Picker) SetConfig(c Config) error {
	params := p.opts.Params
	params.Beta = c.Beta
	pol, err := scoring.New(c.Policy, params, p.state)
	if err != nil {
		return err
	}
	a := &active{cfg: c, params: params, policy: pol, needs: pol.Needs()}
	a.tokenless, _ = pol.(scoring.TokenlessRanker)
	a.leaders, _ = pol.(scoring.LeaderRanker)
	p.active.Store(a)
	return nil
}

// NeedsEngineMetrics reports whether the policy in force reads the engines' scraped
// metrics (scoring.NeedsEngineMetrics), the adapter term does, or the rank choice does
// (a RankEngineView over data-parallel ranks): a scraper need run only while one does.
func (p *Picker) NeedsEngineMetrics() bool {
	return p.active.Load().needs&scoring.NeedsEngineMetrics != 0 ||
		(p.opts.Adapters != nil && len(p.base) > 0 && p.opts.AdapterCost != (AdapterCost{})) ||
		(p.ranks != nil && p.ranks.scraped != nil)
}

// Forget drops the routing history of endpoints not in keep (they left the fleet).
func (p *Picker) Forget(keep []string) {
	p.state.Forget(keep)
	p.metrics.share.forget(keep)
	p.ledger.forget(keep)
}

// PeerBooked records in the routing history a request another replica of this picker
// booked on addr, with its prompt's prefix key (the tag of fleet.Set.BookTagged; 0: none),
// as if this picker had routed it now: the QPS fallback then counts every replica's
// requests, and latencyaware's affinity follows a prefix's last route whichever replica
// took it. It implements replica.History.
func (p *Picker) PeerBooked(addr string, key uint64) {
	now := p.opts.Now()
	p.state.Booked(addr, now)
	p.state.Routed(key, addr, 0, now)
}

// Pick chooses endpoints for r and books the first. The caller must Release the
// Decision's Booking when the request ends. The Decision's slices and map are its own:
// nothing another decision does changes them. PickInto decides the same without
// allocating them.
func (p *Picker) Pick(ctx context.Context, r Request) (Decision, error) {
	var d Decision
	err := p.PickInto(ctx, r, &d)
	return d, err
}

// PickInto is Pick with the caller's memory: it overwrites *d with the decision for r,
// reusing the memory of d.Ranked, d.Endpoints and d.Sources, so a caller that keeps one
// Decision per worker (or pools them) allocates nothing for them in steady state.
//
// Ownership: the caller hands d's previous decision back by passing d. Nothing it kept
// of that decision (the Ranked or Endpoints slices, the Sources map) stays valid, and its
// Booking is overwritten without being released: release it first. The new decision's
// memory is d's alone until d is passed again; two Decisions never share memory.
// On error, *d holds what Pick would have returned with the error.
func (p *Picker) PickInto(ctx context.Context, r Request, d *Decision) error {
	start := time.Now()
	act := p.active.Load()
	*d = Decision{Policy: act.cfg.Policy, Beta: act.cfg.Beta,
		Ranked: d.Ranked[:0], Endpoints: d.Endpoints[:0], Sources: d.Sources}
	if err := p.decideInto(ctx, r, act, d); err != nil {
		return err
	}
	reason := d.Ranked[0].Reason
	p.metrics.decision(d.Policy, reason)
	p.metrics.latency.Observe(time.Since(start).Seconds())
	if p.opts.Logger.Enabled(ctx, slog.LevelDebug) {
		p.opts.Logger.LogAttrs(ctx, slog.LevelDebug, "decision",
			slog.String("request_id", r.RequestID), slog.String("policy", d.Policy), slog.Float64("beta", d.Beta),
			slog.String("winner", d.Endpoints[0]), slog.String("reason", reason),
			slog.Int("prompt_tokens", d.PromptTokens), slog.String("tokens", d.Tokens), slog.String("note", d.Note),
			slog.String("candidates", d.candidates(0)))
	}
	return nil
}

// decideInto is PickInto's decision: *d comes in with its policy and beta set and its
// reusable memory emptied, and leaves with everything else but the metrics.
func (p *Picker) decideInto(ctx context.Context, r Request, act *active, d *Decision) error {

	sc := p.scratch.Get().(*pickScratch)
	defer p.scratch.Put(sc)
	view := p.opts.Fleet.View()
	cands, err := p.candidates(view, r.Subset)
	if err != nil {
		p.metrics.pickErrors.WithLabelValues(errorKind(err)).Inc()
		d.Ranked, d.Endpoints, d.Sources = nil, nil, nil
		return err
	}
	var uv *usableView // the view less its unusable endpoints, when cands are that
	if p.opts.Health != nil {
		ok := true
		if hl, lists := p.opts.Health.(UnhealthyLister); lists && r.Subset == nil {
			if uv, ok = p.usableIn(view, hl.Unhealthy(p.opts.Now())); uv != nil {
				cands = uv.cands
			}
		} else {
			cands, ok = p.opts.Health.Usable(cands, p.opts.Now())
		}
		if !ok {
			p.metrics.unhealthy.Inc()
			d.Note = "every candidate is unhealthy: routed among all of them"
		}
	}

	var tokens []uint32
	d.Tokens = "not-needed"
	cached := act.needs&scoring.NeedsCache != 0
	if cached {
		tokens, d.Tokens, d.Note = p.tokens(ctx, r, cands)
	} else if len(r.Tokens) > 0 {
		tokens, d.Tokens = r.Tokens, "request"
	}
	d.PromptTokens = len(tokens)

	placed := true // cands are view.Addrs()[sc.idx...]
	if uv != nil {
		sc.idx = uv.idx
	} else {
		placed = p.inView(view, cands, sc)
	}
	var matches []CacheMatch // aligned with cands; nil: no cache information, or see held
	held, useHeld := sc.held[:0], false
	key := p.cacheKey(r)
	kv, keyed := p.opts.Cache.(KeyedView)
	keyed = keyed && key != (kvindex.Key{})
	if len(tokens) > 0 && cached {
		if hm, ok := p.opts.Cache.(HeldMatcher); ok && placed && !keyed {
			var err error
			if uv != nil { // the view less a few: cheaper to name those
				held, err = hm.MatchHeld(ctx, tokens, Candidates{All: view.Addrs(), Except: uv.out}, held)
			} else {
				held, err = hm.MatchHeld(ctx, tokens, Candidates{All: view.Addrs(), Subset: sc.idx}, held)
			}
			sc.held = held[:0]
			if err != nil {
				p.metrics.cacheErrors.Inc()
				d.Note = joinNote(d.Note, "cache lookup failed ("+err.Error()+"): no cache credit")
			} else {
				useHeld = true
			}
		} else {
			var ms []CacheMatch
			var err error
			if keyed {
				ms, err = kv.MatchKey(ctx, tokens, key, cands)
			} else {
				ms, err = p.opts.Cache.Match(ctx, tokens, cands)
			}
			switch {
			case err != nil:
				p.metrics.cacheErrors.Inc()
				d.Note = joinNote(d.Note, "cache lookup failed ("+err.Error()+"): no cache credit")
			case len(ms) != len(cands):
				p.metrics.cacheErrors.Inc()
				d.Note = joinNote(d.Note, fmt.Sprintf("cache view answered %d matches for %d endpoints: no cache credit", len(ms), len(cands)))
			default:
				matches = ms
			}
		}
	}

	p.decide.Lock()
	now := p.opts.Now()
	in := scoring.Input{PromptTokens: len(tokens), Session: r.Session, Now: now}
	if act.needs&scoring.NeedsPrefixKey != 0 {
		in.PrefixKey = prefixKey(tokens, key)
	}
	if act.needs&scoring.NeedsTokens != 0 {
		in.Tokens = tokens
	}
	if act.needs&scoring.NeedsPrompt != 0 {
		in.Prompt = r.Prompt
		if in.Prompt == "" {
			in.Prompt = string(r.ChatBody) // stand-in for upstream's joined message contents
		}
	}
	rs := &p.ranking
	// The ranking need only order what the decision keeps, and one more for a booking
	// that fails (an endpoint removed since the view).
	keep := max(p.opts.MaxEndpoints, KeptRanked)
	if r.Explain {
		keep = max(p.opts.MaxEndpoints, maxExplained)
	}
	in.Top = keep + 1
	rank := func(in scoring.Input) []scoring.Ranked {
		if len(tokens) == 0 && act.tokenless != nil {
			return act.tokenless.RankTokenless(in) // nothing to look up
		}
		return act.policy.Rank(in)
	}
	firstRank := func() []scoring.Ranked { // in rs.ranked's memory, kept when it grew
		in.Scratch = rs.ranked[:0]
		ranked := rank(in)
		if cap(ranked) > cap(rs.ranked) {
			rs.ranked = ranked[:0]
		}
		return ranked
	}
	var ranked []scoring.Ranked
	var i int
	var b *fleet.Booking
	sizes := act.needs&scoring.NeedsInFlightSizes != 0
	var hashes []uint64 // the prompt's block hashes, when sizes
	adapterTerm := key.Adapter != "" && p.opts.Adapters != nil && p.opts.AdapterCost != (AdapterCost{})
	if lp := act.leaders; lp != nil && !adapterTerm && useHeld && (sc.idx == nil || uv != nil) && placed && p.opts.Fleet.View() == view && anyMatched(held) {
		// Over the whole view, or the view less a few unusable endpoints, ranking the
		// holders and the least loaded others is enough (scoring.LeaderRanker): the
		// decision reads the loads of those only.
		if rs.leaders(lp, view, held, uv, &in) {
			// Past a refused booking (the winner left the set since the view) the leaders'
			// ranking may part from the whole one: the whole is ranked then.
			if ranked = firstRank(); len(ranked) > 0 {
				b, _ = p.opts.Fleet.BookTagged(ranked[0].Addr, in.PrefixKey)
			}
			if b != nil {
				p.metrics.rankLeaders.Inc()
			} else {
				in.Fleet = scoring.Population{}
			}
		}
	}
	if b == nil {
		rs.fill(p.opts.Fleet, view, cands, sc.idx, placed)
		applyMatches(rs.cands, cands, matches, held, useHeld)
		if adapterTerm {
			p.adapterLoads(rs.cands, key.Adapter)
		}
		if p.opts.Engines != nil && act.needs&scoring.NeedsEngineMetrics != 0 {
			for i := range rs.cands {
				rs.cands[i].Engine = p.opts.Engines.Engine(rs.cands[i].Addr, now)
			}
		}
		if sizes {
			hashes = blockHashes(tokens)
			for i := range rs.cands {
				c := &rs.cands[i]
				c.InFlightPrefill, c.ActiveBlocks, c.NewBlocks = p.ledger.view(c.Addr, hashes)
			}
		}
		in.Candidates, in.Sorted = rs.cands, placed // placed: in the view's order, which is address order
		ranked, i, b = bookFirst(firstRank(), in, rank, p.opts.Fleet.BookTagged)
		p.metrics.rankWhole.Inc()
	}
	if b != nil && sizes {
		m := min(max(ranked[i].Matched, 0), len(tokens))
		b.SetHook(p.ledger.add(b.Addr(), hashes, len(tokens)-m))
	}
	if b != nil {
		d.Booking = b
		d.Candidates = len(in.Candidates) - i
		if in.Fleet.Endpoints > 0 {
			d.Candidates = in.Fleet.Endpoints - i
		}
		d.Ranked = append(d.Ranked, ranked[i:min(len(ranked), i+keep)]...)
		if p.ranks != nil {
			var m CacheMatch
			if at := placeOf(cands, b.Addr()); matches != nil && at >= 0 {
				m = matches[at]
			}
			d.PinRank = p.ranks.choose(b, m)
		}
		p.state.Booked(b.Addr(), now)
		if act.needs&scoring.NeedsUncached != 0 {
			p.state.Uncached(b.Addr(), max(in.PromptTokens-max(ranked[i].Matched, ranked[i].Presumed, 0), 0))
			p.state.Pending(b.Addr(), now, ranked[i].FullEstimate())
		}
		p.state.RoutedPrompt(in.PrefixKey, b.Addr(), tokens, now)
	}
	if r.Explain || p.opts.Logger.Enabled(ctx, slog.LevelDebug) {
		d.Sources = rs.sources(d.Sources, d.Ranked, cands, matches, held, useHeld)
	} else {
		clear(d.Sources) // a map nobody reads costs each Pick 320 B (decision 1141)
	}
	p.decide.Unlock()

	if d.Booking == nil {
		p.metrics.pickErrors.WithLabelValues("no-endpoints").Inc()
		d.Ranked, d.Endpoints, d.Sources = nil, nil, nil
		return ErrNoEndpoints
	}
	for i := 0; i < len(d.Ranked) && i < p.opts.MaxEndpoints; i++ {
		d.Endpoints = append(d.Endpoints, d.Ranked[i].Addr)
	}
	if len(tokens) > 0 {
		p.metrics.share.routed(d.Endpoints[0], p.source, len(tokens), d.Ranked[0].Matched)
		if p.opts.Observer != nil {
			p.opts.Observer.Routed(d.Endpoints[0], tokens)
		}
	}
	return nil
}

// bookFirst books the first entry of ranked (the policy's ranking of in) that book
// accepts, tagged with the prompt's prefix key (fleet.Set.BookTagged), and returns the ranking, that entry's place and its booking (nil when every
// entry was refused: they all left the fleet since the view was taken). A short ranking
// (one of only the leading entries, Input.Top) is asked for in full at its first refusal,
// so the entries that follow are those the full ranking has; such a ranking is pure
// (see Input.Top), so asking again changes nothing else.
func bookFirst(ranked []scoring.Ranked, in scoring.Input, rank func(scoring.Input) []scoring.Ranked,
	book func(addr string, tag uint64) (*fleet.Booking, error)) ([]scoring.Ranked, int, *fleet.Booking) {
	for i := 0; i < len(ranked); i++ {
		b, err := book(ranked[i].Addr, in.PrefixKey)
		if err == nil {
			return ranked, i, b
		}
		if len(ranked) < len(in.Candidates) {
			in.Top = 0
			ranked = rank(in)
		}
	}
	return ranked, 0, nil
}

// candidates returns the endpoints a request may go to: the fleet view's narrowed by the
// subset. Without a subset they are the view's own slice (shared, never modified).
func (p *Picker) candidates(view *fleet.View, subset []string) ([]string, error) {
	all := view.Addrs()
	if len(all) == 0 {
		return nil, ErrNoEndpoints
	}
	if subset == nil {
		return all, nil
	}
	if len(subset) == 0 {
		return nil, ErrSubsetEmpty
	}
	// all is sorted, so each hint is a binary search: an address finds itself, an IP
	// alone every port of it (the addresses that start with "ip:" or "[ip]:").
	var at []int
	for _, s := range subset {
		if a, err := fleet.CanonicalAddr(s); err == nil {
			if i, ok := slices.BinarySearch(all, a); ok {
				at = append(at, i)
			}
			continue
		}
		ip := strings.Trim(s, "[]")
		prefix := ip + ":"
		if strings.Contains(ip, ":") {
			prefix = "[" + ip + "]:"
		}
		i, _ := slices.BinarySearch(all, prefix)
		for ; i < len(all) && strings.HasPrefix(all[i], prefix); i++ {
			if fleet.IP(all[i]) == ip {
				at = append(at, i)
			}
		}
	}
	slices.Sort(at)
	at = slices.Compact(at)
	out := make([]string, len(at))
	for k, i := range at {
		out[k] = all[i]
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w (hint: %s; endpoints: %s)", ErrSubsetUnmatched, strings.Join(subset, ","), strings.Join(all, ","))
	}
	return out, nil
}

// tokens returns the prompt's token ids, where they came from, and a note when there are none.
func (p *Picker) tokens(ctx context.Context, r Request, cands []string) ([]uint32, string, string) {
	if len(r.Tokens) > 0 {
		return r.Tokens, "request", ""
	}
	kind := "text"
	switch {
	case r.ChatBody != nil:
		kind = "chat"
	case r.Prompt == "":
		return nil, "none", "no prompt: routed on load alone"
	}
	if p.opts.Tokenizer == nil {
		p.metrics.untokenized.WithLabelValues(kind + "-no-tokenizer").Inc()
		return nil, "none", "no tokenizer configured (--tokenizer): " + kind + " prompt routed on load alone"
	}
	n := max(len(r.Prompt), len(r.ChatBody))
	if p.opts.MaxPromptBytes > 0 && n > p.opts.MaxPromptBytes {
		p.metrics.untokenized.WithLabelValues(kind + "-too-large").Inc()
		return nil, "none", fmt.Sprintf("the %s prompt is %d bytes, over --max-prompt-bytes %d: not tokenized, routed on load alone", kind, n, p.opts.MaxPromptBytes)
	}
	large := n >= LargePromptBytes
	if large && p.largeCPU.inDebt(p.opts.Now()) {
		p.metrics.untokenized.WithLabelValues(kind + "-tokenizer-over-budget").Inc()
		if k, logIt := p.largeLog.Due("over-budget", p.opts.Now()); logIt {
			p.opts.Logger.Warn("picker: prompts of 32 KiB or more used their tokenizing CPU budget; they are routed on load alone until it refills (logged once a minute; see loadaware_untokenized_requests_total{reason=\"text-tokenizer-over-budget\"}). If honest traffic is refused, raise --large-tokenize-cpu above rate(loadaware_large_tokenize_cpu_seconds_total)",
				"refused", k, "cpu_share", p.opts.LargeTokenizeCPU, "burst", p.opts.LargeTokenizeBurst)
		}
		return nil, "none", fmt.Sprintf("the %s prompt is %d bytes and prompts over %d bytes have used their tokenizing CPU budget (--large-tokenize-cpu %g of one CPU): routed on load alone", kind, n, LargePromptBytes, p.opts.LargeTokenizeCPU)
	}
	if large && p.largeSlots != nil {
		select {
		case p.largeSlots <- struct{}{}:
			defer func() { <-p.largeSlots }()
		default:
			p.metrics.untokenized.WithLabelValues(kind + "-tokenizer-busy").Inc()
			return nil, "none", fmt.Sprintf("the %s prompt is %d bytes and %d prompts over %d bytes are being tokenized already (--large-tokenizations): routed on load alone", kind, n, cap(p.largeSlots), LargePromptBytes)
		}
	}
	var (
		ids []uint32
		err error
	)
	if large && p.largeCPU != nil {
		cpu, _ := threadcpu.Of(func() { ids, err = p.opts.Tokenizer.Tokenize(ctx, r, cands) })
		p.largeCPU.charge(cpu, p.opts.Now())
		p.metrics.largeCPU.Add(cpu.Seconds())
	} else {
		ids, err = p.opts.Tokenizer.Tokenize(ctx, r, cands)
	}
	if err != nil || len(ids) == 0 {
		p.metrics.untokenized.WithLabelValues(kind + "-tokenize-failed").Inc()
		if err == nil {
			err = errors.New("no token ids")
		}
		return nil, "none", "tokenizing failed (" + err.Error() + "): routed on load alone"
	}
	return ids, "tokenizer", ""
}

func errorKind(err error) string {
	switch {
	case errors.Is(err, ErrSubsetEmpty):
		return "subset-empty"
	case errors.Is(err, ErrSubsetUnmatched):
		return "subset-unmatched"
	}
	return "no-endpoints"
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// prefixKey hashes the prompt's first chunk (up to 256 token ids) and, when not the
// zero key, its adapter and salt (the same prompt under two adapters shares no cache);
// 0 for no tokens.
func prefixKey(tokens []uint32, k kvindex.Key) uint64 {
	if len(tokens) == 0 {
		return 0
	}
	h := uint64(14695981039346656037)
	for _, t := range tokens[:min(len(tokens), 256)] {
		h ^= uint64(t)
		h *= 1099511628211
	}
	if k != (kvindex.Key{}) {
		for _, s := range [2]string{k.Adapter, k.Salt} {
			for i := 0; i < len(s); i++ {
				h ^= uint64(s[i])
				h *= 1099511628211
			}
			h ^= 0xff // separates the adapter from the salt
			h *= 1099511628211
		}
	}
	return h | 1
}

// cacheKey is what, besides its tokens, names r's cached blocks: its adapter (a Model
// that is not a base model, when Options.BaseModels are known) and its salt.
func (p *Picker) cacheKey(r Request) kvindex.Key {
	k := kvindex.Key{Salt: r.CacheSalt}
	if len(p.base) > 0 && r.Model != "" && !p.base[r.Model] {
		k.Adapter = r.Model
	}
	return k
}

// adapterLoads adds the residency term (AdapterCost) to the loads of the candidates that
// would have to load adapter.
func (p *Picker) adapterLoads(cs []scoring.Candidate, adapter string) {
	for i := range cs {
		var n int
		switch p.opts.Adapters.State(cs[i].Addr, adapter) {
		case lora.FreeSlot:
			n = p.opts.AdapterCost.FreeSlot
		case lora.SlotsFull:
			n = p.opts.AdapterCost.SlotsFull
		}
		cs[i].InFlight += n
		cs[i].Prefill += n
	}
}

func baseModels(names []string) map[string]bool {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// candidate is an endpoint's load as a policy sees it, before its cache match is applied.
func candidate(l fleet.Load) scoring.Candidate {
	return scoring.Candidate{Addr: l.Addr, HolderRank: -1, InFlight: l.InFlight(),
		Prefill: l.Prefill, Decode: l.Decode, DecodePace: l.DecodePace}
}
