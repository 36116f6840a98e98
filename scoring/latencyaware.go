package scoring

import (
	"math"
	"strconv"
	"time"
)

// LatencyAware is this project's policy for the time to first token: loadaware's score
// with a load that counts what delays a new request's first token, and a cache credit
// that keeps cold prefixes on one engine.
//
//		load(s)     = sqrt(pace(s)) * (decode(s) + PrefillWeight * (prefill(s) + miss(s)/PrefillTokenUnit))
//		miss(s)     = max(0, prompt_tokens - matched(s) - MissAllowance)
//		relative(s) = (load(s) - mean load) / max(1, mean load)
//		affinity(s) = AffinityBonus if s is where this prompt's first chunk was last routed,
//		              within AffinityWindow, and that prefix is cold (rate < HotRate); else 0
//		score(s)    = matched(s)/prompt_tokens + affinity(s) - Beta * relative(s)
//
//	  - decode(s), prefill(s): this picker's requests on s past / before their first token;
//	    a request in prefill delays every admission behind it (vLLM admits new requests
//	    step by step), so it weighs PrefillWeight decoding ones.
//	  - miss(s) is what this request would prefill on s beyond one step's token budget: a
//	    miss that fits in one step (MissAllowance) costs its engine one longer step and
//	    replicates the prefix there, which pays off when the prefix is hot; a longer one
//	    holds the engine for several steps, so it counts as the admissions it is worth.
//	  - pace(s): s's measured mean decode duration (first token to end, fleet.Load) over the
//	    candidates' mean: a slower engine's requests cost more of its time. The square root
//	    damps it; unmeasured endpoints count as the mean.
//	  - affinity keeps a prompt family that arrives rarely on the engine that served it last
//	    (its blocks are likely still on that GPU), so hot prefixes carry the balancing and
//	    are replicated, cold ones are not.
//	  - Unlike loadaware there is no QPS fallback: when nobody holds the prompt, the load
//	    term alone decides (reason least-load).
//
// Highest score wins; ties to the smallest address.
type LatencyAware struct {
	Beta  float64
	state *State
}

// LatencyAware's constants; docs/decisions/1320-latencyaware.md gives the scans that
// chose the fitted ones.
const (
	// PrefillWeight: a request waiting for its first token counts as three decoding ones
	// (fitted: 1, 2, 3, 4, 8 scanned).
	PrefillWeight = 3.0
	// PrefillTokenUnit: uncached prompt tokens worth one more request in prefill. On the
	// A10 model an admission costs ~25 ms and a prompt token ~0.2 ms of prefill compute
	// (2 x 3.09e9 FLOP per token at 31 TFLOP/s achieved), so ~128 tokens.
	PrefillTokenUnit = 128.0
	// MissAllowance: the uncached tokens one engine step prefills (vLLM's
	// max_num_batched_tokens, 2048 on the published engines) are not charged.
	MissAllowance = 2048
	// The pace ratio enters as its square root (fitted: exponents 0, 0.5, 0.75, 0.8, 1 and
	// 1.5 scanned): the full ratio moves so much load to the fast engine that its queue
	// grows.

	// AffinityBonus, AffinityWindow, HotRate, HotTau: the cold-prefix affinity (fitted).
	AffinityBonus  = 0.3
	AffinityWindow = 60 * time.Second
	HotRate        = 0.3 // requests per second of one prefix, decayed over HotTau
	HotTau         = 10 * time.Second
)

// Name implements Policy.
func (*LatencyAware) Name() string { return "latencyaware" }

// Needs implements Policy.
func (*LatencyAware) Needs() Needs { return NeedsCache | NeedsPrefixKey | NeedsBeta }

// AppendTerms implements TermsExplainer: the weighted load and the affinity credit.
func (*LatencyAware) AppendTerms(b []byte, r Ranked) []byte {
	b = append(b, " load="...)
	b = strconv.AppendFloat(b, r.Load, 'f', 2, 64)
	b = append(b, " affinity="...)
	return strconv.AppendFloat(b, r.Affinity, 'f', 1, 64)
}

// Rank implements Policy.
func (p *LatencyAware) Rank(in Input) []Ranked {
	rs := base(in, ReasonCacheAffinity)
	if len(rs) == 0 {
		return rs
	}
	var paceSum float64
	paced := 0
	for _, c := range in.Candidates {
		if c.DecodePace > 0 {
			paceSum += c.DecodePace.Seconds()
			paced++
		}
	}
	invMeanPace := float64(paced) / max(paceSum, 1e-12)
	var sum float64
	for i, c := range in.Candidates {
		miss := max(in.PromptTokens-max(c.Matched, 0)-MissAllowance, 0)
		l := float64(c.Decode) + PrefillWeight*(float64(c.Prefill)+float64(miss)/PrefillTokenUnit)
		if c.DecodePace > 0 {
			l *= math.Sqrt(c.DecodePace.Seconds() * invMeanPace)
		}
		rs[i].Load = l
		sum += l
	}
	m := sum / float64(len(rs))
	last, hot := p.state.lastRouted(in.PrefixKey, in.Now)
	best := 0.0
	for i, c := range in.Candidates {
		rs[i].Benefit = matchFraction(c, in.PromptTokens)
		rs[i].RelativeLoad = (rs[i].Load - m) / max(1, m)
		if rs[i].Addr == last && !hot {
			rs[i].Affinity = AffinityBonus
		}
		rs[i].Score = rs[i].Benefit + rs[i].Affinity - p.Beta*rs[i].RelativeLoad
		best = max(best, rs[i].Benefit)
	}
	sortByScore(in, rs)
	switch {
	case best == 0:
		label(rs, ReasonLeastLoad)
	case rs[0].Benefit < best:
		label(rs, ReasonLoadBalance)
	}
	return rs
}
