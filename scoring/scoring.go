// Package scoring holds the routing policies as pure functions over candidates.
//
// A policy ranks the candidate endpoints of one request, best first. Policies do no I/O,
// read no clocks and keep no globals: the caller passes the time and the loads in Input.
// The few policies that need history (the round-robin position, the QPS window) keep it
// in a *State that the caller owns and passes to New, so that history survives a policy
// or beta change at run time.
//
// Contract shared by every policy: Rank is called once per routing decision, its first
// entry is the endpoint that will be booked, and equal inputs (with equal State) give
// equal outputs. A ranking holds every candidate (with Input.Top set, it may hold only
// the leading ones: see there), but only its first Input.Top entries
// (TopRanked when Top is 0; all of them when there are fewer) are promised in order: the
// ranking helpers select those without sorting the rest, so a decision over a large
// fleet costs time linear in the fleet.
package scoring

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Candidate is one endpoint that may serve a request, with the signals a policy may use.
type Candidate struct {
	Addr       string // "ip:port"
	Matched    int    // prompt tokens this endpoint already holds, as a contiguous prefix
	HolderRank int    // order in which this endpoint stored the prompt's first chunk; -1 if none
	InFlight   int    // requests in flight: prefill + decode
	Prefill    int    // of those, requests without a first token yet
	Decode     int    // of those, requests past their first token
	// DecodePace is the endpoint's recent mean decode duration (first token to end); 0
	// when not measured.
	DecodePace time.Duration
	// The picker's own account of its requests in flight on the endpoint, with their sizes
	// (what Dynamo's and llm-d's routers keep per worker). Filled only for policies that read
	// it (NeedsInFlightSizes); 0 otherwise.
	InFlightPrefill int // uncached prompt tokens of requests not yet past their first token
	ActiveBlocks    int // distinct 16-token KV blocks of the prompts in flight, a shared block counted once
	NewBlocks       int // this prompt's full blocks that are not among ActiveBlocks
	// Engine is what the endpoint's own /metrics said when last scraped. It is filled only
	// for policies that read it (NeedsEngineMetrics); the zero value means not known (no
	// scrape has succeeded, or nobody scrapes).
	Engine EngineMetrics
}

// EngineMetrics is one endpoint's vLLM metrics as a scraper last saw them, under vLLM's
// meanings. Known is false in the zero value: then every other field is meaningless, and a
// policy must not read a zero queue or usage from it.
type EngineMetrics struct {
	Known   bool
	Running int     // vllm:num_requests_running: requests in the engine's running batch
	Waiting int     // vllm:num_requests_waiting: requests queued in the engine, not yet scheduled
	KVUsage float64 // vllm:kv_cache_usage_perc: share of the GPU KV blocks in use, 0..1
	// KVPoolTokens is the GPU KV pool in tokens (vllm:cache_config_info's num_gpu_blocks x
	// block_size); 0 when the engine does not export it.
	KVPoolTokens int
	// PrefillSlowdown is the engine's measured prefill time over the calibrated model's,
	// smoothed over its recent requests (enginemetrics.PrefillSpeed): 1.3 for an engine
	// whose prefill takes 1.3 times the A10's; 0 when not measured.
	PrefillSlowdown float64
	// Age is how long before the decision the scrape was taken: the staleness of the
	// three numbers above (0 up to the scraper's interval in steady state).
	Age time.Duration
}

// Input is everything a policy sees of one request.
type Input struct {
	PromptTokens int
	Session      string    // session key value; "" when the request carries none
	Now          time.Time // decision time, for the QPS window
	PrefixKey    uint64    // hash of the prompt's first chunk of tokens; 0 when there are none
	Tokens       []uint32  // the prompt's token ids (NeedsTokens); nil when not asked for or none
	Prompt       string    // the prompt text (prefixaware's trie), or the chat messages' contents
	Candidates   []Candidate
	// Top is how many leading entries of the ranking the caller reads: the policy puts at
	// least that many first and in order (see the package comment). 0, or more than
	// TopRanked, means TopRanked. A smaller Top makes a ranking over a large fleet cheaper;
	// it never changes which entries come first or their order. When Top is more than 0,
	// a policy may also return only the leading entries (at least Top+1, or every
	// candidate when there are fewer); one that does ranks equal inputs equally without
	// changing its State, so the caller may ask again with Top 0 for the rest.
	Top int
	// Sorted promises that Candidates are in strictly ascending address order, as the
	// fleet gives them. Ties between scores are then broken by place, which is the same
	// order, without comparing addresses. A false promise makes the tie-break undefined.
	Sorted bool
	// Fleet, when its Endpoints is more than 0, says Candidates are only some of the
	// endpoints the request may go to: those that can lead the ranking of all of them
	// (LoadAware.Leaders says which). The mean load is then the whole fleet's. Only
	// LoadAware reads it: other policies must be given every candidate.
	Fleet Population
	// Scratch, when its capacity is at least len(Candidates), is memory the ranking is
	// built in (the result aliases it), so a caller that reuses it between decisions
	// allocates nothing per candidate. Every ranking started within one Rank gets the same
	// memory: a policy needing two at once copies the first.
	Scratch []Ranked
}

// Population is the whole of a fleet that a ranking over some of it stands for
// (Input.Fleet).
type Population struct {
	Endpoints int // how many endpoints
	InFlight  int // their requests in flight, summed
}

// Ranked is one candidate's place in a decision, with the numbers that put it there.
type Ranked struct {
	Addr         string
	Score        float64
	Benefit      float64 // matched fraction of the prompt (loadaware, the peers); 0 for policies without it
	RelativeLoad float64 // (in-flight - mean) / max(1, mean)
	Matched      int
	InFlight     int
	Reason       string  // why the decision went this way; the same for every entry of one ranking
	Load         float64 // latencyaware: its weighted load (see LatencyAware); 0 for the others
	Affinity     float64 // latencyaware: its cold-prefix affinity credit; 0 for the others
	Estimate     float64 // ttftaware: estimated time to first token, seconds; 0 for the others
	KVWait       float64 // ttftaware: of Estimate, the wait for KV capacity, seconds; 0 for the others
	Presumed     int     // ttftaware: prompt tokens presumed held from the routing history (TTFTAware); 0 for the others
	Slowdown     float64 // ttftaware: the engine's measured prefill slowdown Estimate was scaled by (1: not measured); 0 for the others
	QueuedFull   float64 // ttftaware: the queued prefill charged in full, before the queue's cap (Load is what was charged; FullEstimate); 0 for the others
	Drain        float64 // ttftaware: the engine's measured ratio of observed to predicted times to first token the cap was aged by (0: not measured); 0 for the others
}

// FullEstimate is ttftaware's estimated time to first token with the queued prefill
// charged in full (QueuedFull in place of the capped Load): the prediction State.Pending
// records at booking, which the queue's cap ages.
func (r Ranked) FullEstimate() float64 { return r.Estimate - r.Load + r.QueuedFull }

// Policy ranks candidates. See the package comment for the contract.
type Policy interface {
	Name() string
	// Needs says which signals beyond the candidates' loads the policy reads; a caller
	// may leave the others out of Input (zero) and save their cost.
	Needs() Needs
	Rank(Input) []Ranked
}

// Needs is the set of signals a policy reads beyond the candidates' loads (addresses,
// in-flight, prefill and decode counts, decode pace, which every policy gets).
type Needs uint8

const (
	// NeedsCache: the prompt's token count (Input.PromptTokens) and each candidate's
	// cache match (Candidate.Matched, HolderRank); the caller tokenizes the prompt and
	// looks it up.
	NeedsCache Needs = 1 << iota
	// NeedsPrefixKey: Input.PrefixKey, the hash of the prompt's first chunk of tokens.
	NeedsPrefixKey
	// NeedsPrompt: Input.Prompt, the prompt text.
	NeedsPrompt
	// NeedsUncached: the caller records each booked request's uncached prompt tokens
	// (PromptTokens - the winner's Matched) with State.Uncached, and its predicted first
	// token (the winner's Ranked.FullEstimate) with State.Pending.
	NeedsUncached
	// NeedsBeta: the policy weighs its load term by Params.Beta (an explanation shows it).
	NeedsBeta
	// NeedsEngineMetrics: each candidate's scraped vLLM metrics (Candidate.Engine); the
	// caller scrapes the engines while such a policy is in force.
	NeedsEngineMetrics
	// NeedsInFlightSizes: the caller's account of its requests in flight with their sizes
	// (Candidate.InFlightPrefill, ActiveBlocks, NewBlocks); the caller keeps it only for
	// such a policy.
	NeedsInFlightSizes
	// NeedsTokens: Input.Tokens, the prompt's token ids; the caller records each booked
	// request's prompt with State.RoutedPrompt (ttftaware tells a session's next turn
	// from another request of its prefix's family by them).
	NeedsTokens
)

// TokenlessRanker is a Policy that ranks a request without token ids (Input.PromptTokens
// 0, nothing matched) otherwise than its Rank would. A caller that has no token ids for a
// request calls RankTokenless instead of Rank; the contract is Rank's.
type TokenlessRanker interface {
	RankTokenless(Input) []Ranked
}

// LeaderRanker is a Policy that can rank a fleet from its leaders alone: of the endpoints
// holding part of the prompt, the least loaded of each matched length, and the least
// loaded others (see LoadAware.Leaders, which states the contract). A caller that can find those cheaply over a large fleet ranks
// them only.
type LeaderRanker interface {
	Leaders(Input) int
	RanksLeaders(Population) bool
}

// TermsExplainer is a Policy whose rankings carry terms of its own beside the common
// ones (Ranked's matched, in-flight, relative load and score): AppendTerms appends r's,
// as " name=value" pairs, for an explanation.
type TermsExplainer interface {
	AppendTerms(b []byte, r Ranked) []byte
}

// Reasons a decision can give. They label the decision metrics, so the set is closed.
const (
	ReasonRoundRobin    = "roundrobin"     // next in the stable order
	ReasonLeastLoad     = "least-load"     // fewest in flight
	ReasonSession       = "session"        // consistent hash of the session key
	ReasonQPS           = "qps-fallback"   // lowest request rate over the window
	ReasonCacheHolder   = "cache-holder"   // kvaware: first holder of chunk 0
	ReasonCacheAffinity = "cache-affinity" // loadaware: the best-matched endpoint won
	ReasonLoadBalance   = "load-balance"   // loadaware: the load term overruled the best match
	ReasonLoadOnly      = "load-only"      // the request had no token ids: ranked by load alone
	ReasonNoCandidates  = "no-candidates"

	// Reasons of the peer policies (peers.go).
	ReasonImbalance   = "imbalance"      // sglang, aibrix: the load-imbalance guard tripped: fewest in flight
	ReasonBestMatch   = "best-match"     // sglang, aibrix: the cache rule chose an endpoint holding the prompt
	ReasonLowMatch    = "low-match"      // sglang, aibrix: no match good enough: fewest in flight
	ReasonHoldersBusy = "holders-busy"   // aibrix: every holder above mean + 1 sigma: fewest in flight
	ReasonWeighted    = "weighted-score" // gie-default, llmd-precise: highest weighted sum of scorers
	ReasonLowestCost  = "lowest-cost"    // dynamo-kv: lowest prefill + decode block cost
	ReasonQueueGated  = "queue-gated"    // sglang with --worker-queue-limit: every holder's engine is queueing: the least loaded that is not
	ReasonSticky      = "sticky"         // llmd-sticky: narrowed to the endpoints holding 0.80 of the prompt, then fewest in-flight tokens
	ReasonUnstuck     = "unstuck"        // llmd-sticky: the holders' in-flight tokens broke the stickiness: fewest in-flight tokens of all
	ReasonTokenLoad   = "token-load"     // llmd-sticky: nobody holds 0.80 of the prompt: fewest in-flight tokens

	// Reasons of ttftaware (ttftaware.go).
	ReasonLowestTTFT     = "lowest-ttft"     // the lowest estimated time to first token won
	ReasonHolderSticky   = "holder-sticky"   // a holder won over a lower estimate: the move's recompute outweighed its queue
	ReasonFleetSaturated = "fleet-saturated" // every candidate saturated: the least miss won, nothing diverted
	ReasonReplica        = "replica"         // a copy of the prefix on a non-holder pays its family more than it costs
	ReasonReferencedCopy = "referenced-copy" // a copy its family keeps referenced moves at least one of its sequences off each holder (decision 1732)
)

// Names of the policies New knows, in the order the CLI lists them.
var Names = []string{"loadaware", "kvaware", "roundrobin", "leastload", "session",
	"sglang-cache-aware", "aibrix-prefix-cache", "gie-default", "dynamo-kv", "llmd-precise", "prefixaware", "latencyaware",
	"llmd-sticky", "ttftaware"}

// Params are the tunables of the policies. Zero values are not defaults: use DefaultParams.
type Params struct {
	Beta        float64 // loadaware: weight of the load term; 0 = pure cache affinity
	KVThreshold int     // kvaware: kv_aware_threshold, in tokens
}

// DefaultParams returns the published defaults: beta 1.0 and kv_aware_threshold 2000.
func DefaultParams() Params { return Params{Beta: 1.0, KVThreshold: 2000} }

// New returns the policy called name. state carries history across policies and may be
// shared by all of them; it must not be nil.
func New(name string, p Params, state *State) (Policy, error) {
	if state == nil {
		return nil, fmt.Errorf("scoring: New(%q) needs a non-nil *State", name)
	}
	if err := ValidateBeta(p.Beta); err != nil {
		return nil, err
	}
	switch name {
	case "loadaware":
		return &LoadAware{Beta: p.Beta, state: state}, nil
	case "kvaware":
		return &KVAware{Threshold: p.KVThreshold, state: state}, nil
	case "roundrobin":
		return &RoundRobin{state: state}, nil
	case "leastload":
		return LeastLoad{}, nil
	case "session":
		return &Session{state: state}, nil
	case "sglang-cache-aware":
		return SGLangCacheAware{}, nil
	case "aibrix-prefix-cache":
		return AIBrixPrefixCache{}, nil
	case "gie-default":
		return GIEDefault{}, nil
	case "dynamo-kv":
		return DynamoKV{}, nil
	case "llmd-precise":
		return LLMDPrecise{}, nil
	case "llmd-sticky":
		return LLMDSticky{}, nil
	case "prefixaware":
		return &PrefixAware{state: state}, nil
	case "latencyaware":
		return &LatencyAware{Beta: p.Beta, state: state}, nil
	case "ttftaware":
		return &TTFTAware{state: state}, nil
	}
	return nil, fmt.Errorf("unknown policy %q: use one of %s", name, strings.Join(Names, ", "))
}

// Describe returns the policy called name with the default parameters, for what it
// declares (Needs, the optional interfaces), not to rank with: every call returns the same
// one, whose State is its own. It returns nil for an unknown name.
func Describe(name string) Policy { return described()[name] }

var described = sync.OnceValue(func() map[string]Policy {
	m := make(map[string]Policy, len(Names))
	state := NewState()
	for _, name := range Names {
		if p, err := New(name, DefaultParams(), state); err == nil { // New knows every name of Names
			m[name] = p
		}
	}
	return m
})

// ValidateBeta reports whether beta is a usable load weight (finite, 0 <= beta <= 100).
func ValidateBeta(beta float64) error {
	if !(beta >= 0 && beta <= 100) { // also rejects NaN
		return fmt.Errorf("beta %v is out of range: use a number from 0 (pure cache affinity) to 100; 1.0 is the default", beta)
	}
	return nil
}

// mean returns the average in-flight count of the candidates (0 for none).
func mean(cs []Candidate) float64 {
	if len(cs) == 0 {
		return 0
	}
	sum := 0
	for _, c := range cs {
		sum += c.InFlight
	}
	return float64(sum) / float64(len(cs))
}

// meanLoad is the mean in-flight count of the fleet in stands for: Fleet's when set,
// else the candidates'.
func (in Input) meanLoad() float64 {
	if in.Fleet.Endpoints > 0 {
		return float64(in.Fleet.InFlight) / float64(in.Fleet.Endpoints)
	}
	return mean(in.Candidates)
}

// relativeLoad is (inflight - mean) / max(1, mean).
func relativeLoad(inflight int, m float64) float64 {
	return (float64(inflight) - m) / max(1, m)
}

// base returns one Ranked per candidate carrying its plain signals, in candidate order,
// in in.Scratch when it is large enough.
func base(in Input, reason string) []Ranked {
	m := mean(in.Candidates)
	out := scratchFor(in)
	for i, c := range in.Candidates {
		out[i] = Ranked{
			Addr:         c.Addr,
			RelativeLoad: relativeLoad(c.InFlight, m),
			Matched:      c.Matched,
			InFlight:     c.InFlight,
			Reason:       reason,
		}
	}
	return out
}

// scratchFor returns len(in.Candidates) entries to build a ranking in: in.Scratch's
// memory when it is large enough, else new.
func scratchFor(in Input) []Ranked {
	out := in.Scratch[:0]
	if cap(out) < len(in.Candidates) {
		out = make([]Ranked, len(in.Candidates))
	}
	return out[:len(in.Candidates)]
}

// label gives every entry of a ranking the same reason (a ranking has one).
func label(rs []Ranked, reason string) {
	for i := range rs {
		rs[i].Reason = reason
	}
}

// scoreEpsilon is how close two scores must be to count as a tie. Scores are sums of
// fractions, so a tie in exact arithmetic (1 - 2/3 against 0 + 1/3) can differ in the last
// bit of float64; those ties go to the smallest address as the policy says.
const scoreEpsilon = 1e-9

// TopRanked is how many leading entries of a ranking are in order (see the package
// comment): enough for the longest fallback list a caller may ask for (--max-endpoints is
// at most 64).
const TopRanked = 64

// sortedPrefix is how many entries the score helpers put in order: one more than
// TopRanked, so a policy that then moves one entry to the front (kvaware, the peers'
// winnerFirst) still returns TopRanked in order.
const sortedPrefix = TopRanked + 1

// byScore orders best first: highest score, then the smallest address.
func byScore(a, b *Ranked) int {
	if math.Abs(a.Score-b.Score) > scoreEpsilon {
		return cmp.Compare(b.Score, a.Score)
	}
	return strings.Compare(a.Addr, b.Addr)
}

// prefix is how many entries the score helpers put in order for in: one more than the
// caller reads (Top, else TopRanked), so a policy that then moves one entry to the front
// (kvaware, the peers' winnerFirst) still returns them in order.
func (in Input) prefix() int {
	t := in.Top
	if t <= 0 || t > TopRanked {
		t = TopRanked
	}
	return t + 1
}

// sortByScore puts the best in.prefix() entries of rs, a ranking of in.Candidates in
// their order, first, in byScore order; the others follow in no particular order.
func sortByScore(in Input, rs []Ranked) { sortTop(rs, in.prefix(), in.Sorted) }

// sortTop puts the k best entries of rs (byScore) first and in order, the others after
// them in no particular order. It keeps the k best seen in a heap whose root is the worst
// of them, so an entry that does not beat the root costs one comparison: O(n + k log k)
// for candidates that arrive in address order, O(n log k) at worst. sorted promises that
// rs is in strictly ascending address order: a tie is then decided by place.
func sortTop(rs []Ranked, k int, sorted bool) {
	if len(rs) <= 2*k {
		slices.SortFunc(rs, func(a, b Ranked) int { return byScore(&a, &b) })
		return
	}
	sortTopHeap(rs, k, sorted)
}

// sortTopHeap is sortTop's heap path, apart so that its 6 KiB of stack arrays are not in the
// frame of every small fleet's decision (a stream's stack then fits in 16 KiB: decision 1115).
//
//go:noinline
func sortTopHeap(rs []Ranked, k int, sorted bool) {
	var heapBuf [sortedPrefix]int32
	h := heapBuf[:0]
	if k > len(heapBuf) {
		h = make([]int32, 0, k)
	}
	down := func(i int) {
		for {
			w, l, r := i, 2*i+1, 2*i+2
			if l < len(h) && byScore(&rs[h[l]], &rs[h[w]]) > 0 {
				w = l
			}
			if r < len(h) && byScore(&rs[h[r]], &rs[h[w]]) > 0 {
				w = r
			}
			if w == i {
				return
			}
			h[i], h[w] = h[w], h[i]
			i = w
		}
	}
	for i := range k {
		h = append(h, int32(i))
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	floor := rs[h[0]].Score - scoreEpsilon // an entry scoring under it cannot beat the root
	for i := k; i < len(rs); i++ {
		if rs[i].Score < floor {
			continue
		}
		if sorted {
			// Every entry of the heap comes before i, so in address order: i beats the
			// root only by more than a tie (byScore's first case; NaN never does).
			if !(rs[i].Score-rs[h[0]].Score > scoreEpsilon) {
				continue
			}
		} else if byScore(&rs[i], &rs[h[0]]) >= 0 {
			continue
		}
		h[0] = int32(i)
		down(0)
		floor = rs[h[0]].Score - scoreEpsilon
	}
	// Order the k best. Candidates usually arrive in address order: then the address
	// tie-break is the place, and the sort compares no strings.
	slices.Sort(h)
	byPlace := true
	for j := 1; !sorted && j < len(h) && byPlace; j++ {
		byPlace = rs[h[j-1]].Addr < rs[h[j]].Addr
	}
	if byPlace {
		slices.SortFunc(h, func(a, b int32) int {
			if d := rs[a].Score - rs[b].Score; math.Abs(d) > scoreEpsilon {
				return cmp.Compare(rs[b].Score, rs[a].Score)
			}
			return cmp.Compare(a, b)
		})
	} else {
		slices.SortFunc(h, func(a, b int32) int { return byScore(&rs[a], &rs[b]) })
	}
	// Move the k best to the front: entries of the front that are not among them go to
	// the places the best leave.
	var inFront [sortedPrefix]bool
	front := inFront[:0]
	if k > len(inFront) {
		front = make([]bool, 0, k)
	}
	front = front[:k]
	var topBuf [sortedPrefix]Ranked
	top := topBuf[:0]
	if k > len(topBuf) {
		top = make([]Ranked, 0, k)
	}
	for _, i := range h {
		top = append(top, rs[i])
		if int(i) < k {
			front[i] = true
		}
	}
	p := 0 // the next front place to empty
	for _, i := range h {
		if int(i) < k {
			continue
		}
		for front[p] {
			p++
		}
		rs[i] = rs[p]
		p++
	}
	copy(rs, top)
}

// sortByAddr orders by address, the stable order round-robin and the ring rely on.
func sortByAddr(rs []Ranked) {
	slices.SortFunc(rs, func(a, b Ranked) int { return strings.Compare(a.Addr, b.Addr) })
}
