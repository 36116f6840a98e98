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
// equal outputs.
package scoring

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
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
	// PrefillTokens is the uncached prompt tokens the requests in prefill must compute.
	PrefillTokens int
	// DecodePace is the endpoint's recent mean decode duration (first token to end); 0
	// when not measured.
	DecodePace time.Duration
}

// Input is everything a policy sees of one request.
type Input struct {
	PromptTokens int
	Session      string    // session key value; "" when the request carries none
	Now          time.Time // decision time, for the QPS window
	PrefixKey    uint64    // hash of the prompt's first chunk of tokens; 0 when there are none
	Prompt       string    // the prompt text (prefixaware's trie), or the chat messages' contents
	Candidates   []Candidate
}

// Ranked is one candidate's place in a decision, with the numbers that put it there.
type Ranked struct {
	Addr         string
	Score        float64
	Benefit      float64 // matched fraction of the prompt (loadaware, the peers); 0 for policies without it
	RelativeLoad float64 // (in-flight - mean) / max(1, mean)
	Matched      int
	InFlight     int
	Reason       string // why the decision went this way; the same for every entry of one ranking
	Terms        string // a policy's own terms for the explain header ("load=12.00 affinity=0.3"); "" for most
}

// Policy ranks candidates. See the package comment for the contract.
type Policy interface {
	Name() string
	Rank(Input) []Ranked
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
)

// Names of the policies New knows, in the order the CLI lists them.
var Names = []string{"loadaware", "kvaware", "roundrobin", "leastload", "session",
	"sglang-cache-aware", "aibrix-prefix-cache", "gie-default", "dynamo-kv", "llmd-precise", "prefixaware", "latencyaware"}

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
	case "prefixaware":
		return &PrefixAware{state: state}, nil
	case "latencyaware":
		return &LatencyAware{Beta: p.Beta, state: state}, nil
	}
	return nil, fmt.Errorf("unknown policy %q: use one of %s", name, strings.Join(Names, ", "))
}

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

// relativeLoad is (inflight - mean) / max(1, mean).
func relativeLoad(inflight int, m float64) float64 {
	return (float64(inflight) - m) / max(1, m)
}

// base returns one Ranked per candidate carrying its plain signals, in candidate order.
func base(in Input, reason string) []Ranked {
	m := mean(in.Candidates)
	out := make([]Ranked, len(in.Candidates))
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

// scoreEpsilon is how close two scores must be to count as a tie. Scores are sums of
// fractions, so a tie in exact arithmetic (1 - 2/3 against 0 + 1/3) can differ in the last
// bit of float64; those ties go to the smallest address as the policy says.
const scoreEpsilon = 1e-9

// sortByScore orders best first: highest score, then the smallest address.
func sortByScore(rs []Ranked) {
	slices.SortFunc(rs, func(a, b Ranked) int {
		if math.Abs(a.Score-b.Score) > scoreEpsilon {
			return cmp.Compare(b.Score, a.Score)
		}
		return strings.Compare(a.Addr, b.Addr)
	})
}

// sortByAddr orders by address, the stable order round-robin and the ring rely on.
func sortByAddr(rs []Ranked) {
	slices.SortFunc(rs, func(a, b Ranked) int { return strings.Compare(a.Addr, b.Addr) })
}
