package scoring

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// Peer policies: other projects' published routing rules, re-stated over the signals this
// picker has (matched prefix, in-flight count), so the bench can run every known idea on
// the same fleet. Each doc comment cites its source and names every stand-in; where the
// source breaks ties at random, ties here go to the smallest address so runs reproduce.
// docs/decisions/1300-peer-policies.md gives the reasons for each stand-in.

// Defaults of the peers, as their sources publish them.
const (
	sglangBalanceAbs     = 64  // SGLang --balance-abs-threshold
	sglangBalanceRel     = 1.5 // SGLang --balance-rel-threshold
	sglangCacheThreshold = 0.3 // SGLang --cache-threshold

	aibrixImbalanceAbs = 8 // AIBrix AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT
	aibrixStdDevFactor = 1 // AIBrix AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR

	weightQueue  = 2.0 // queue-scorer (GIE default profile; llm-d precise guide)
	weightPrefix = 3.0 // prefix-cache-scorer / precise-prefix-cache-scorer
	// The kv-cache-utilization-scorer (weight 2 in both) is left out: see GIEDefault.

	dynamoBlockSize     = 16  // Dynamo's KV block, in tokens
	dynamoOverlapWeight = 1.0 // Dynamo --kv-overlap-score-weight
)

// matchFraction is the share of the prompt an endpoint holds, in [0, 1].
func matchFraction(c Candidate, prompt int) float64 {
	return float64(min(max(c.Matched, 0), prompt)) / float64(max(prompt, 1))
}

// loadRange returns the fewest and the most in flight among the candidates.
func loadRange(cs []Candidate) (lo, hi int) {
	for i, c := range cs {
		if i == 0 || c.InFlight < lo {
			lo = c.InFlight
		}
		if i == 0 || c.InFlight > hi {
			hi = c.InFlight
		}
	}
	return lo, hi
}

// withBenefit fills every entry's Benefit with its matched fraction of the prompt.
func withBenefit(rs []Ranked, prompt int) []Ranked {
	for i := range rs {
		rs[i].Benefit = float64(min(rs[i].Matched, prompt)) / float64(max(prompt, 1))
	}
	return rs
}

// winnerFirst moves the entry for addr to the front, keeps the others in order, and scores
// the ranking by position (len for the first, 1 for the last) with one reason.
func winnerFirst(rs []Ranked, addr, reason string) []Ranked {
	out := make([]Ranked, 0, len(rs))
	for _, r := range rs {
		if r.Addr == addr {
			out = append(out, r)
		}
	}
	for _, r := range rs {
		if r.Addr != addr {
			out = append(out, r)
		}
	}
	for i := range out {
		out[i].Score = float64(len(out) - i)
		out[i].Reason = reason
	}
	return out
}

// SGLangCacheAware is SGLang's router policy cache_aware (sgl-project/sglang,
// sgl-router/src/policies/cache_aware.rs, CacheAwarePolicy::select_worker; defaults from
// the router's --cache-threshold 0.3, --balance-abs-threshold 64, --balance-rel-threshold
// 1.5). The fleet counts as imbalanced when the most loaded endpoint has more than 64
// requests over the least loaded AND more than 1.5 times its load; then the least loaded
// wins (ReasonImbalance). Otherwise the endpoint with the longest matched prefix wins if
// that match covers more than 0.3 of the prompt (ReasonBestMatch); below that the least
// loaded wins (ReasonLowMatch).
//
// Stand-ins: load is the picker's in-flight count (SGLang counts the requests it has
// outstanding on each worker, the same quantity). The match is the cache index's matched
// tokens over the prompt's tokens, where SGLang matches characters in its own router-side
// radix tree. On a low match SGLang picks the worker whose tree is smallest; the picker
// has no tree, so the least loaded stands in, as the project's policy spec states. Ties
// go to the smallest address; SGLang takes the first in its own order.
type SGLangCacheAware struct{}

// Name implements Policy.
func (SGLangCacheAware) Name() string { return "sglang-cache-aware" }

// Needs implements Policy.
func (SGLangCacheAware) Needs() Needs { return NeedsCache }

// Rank implements Policy. In the match branch the ranking is by match, then address; in
// the load branches by in-flight, then address.
func (SGLangCacheAware) Rank(in Input) []Ranked {
	lo, hi := loadRange(in.Candidates)
	if hi-lo > sglangBalanceAbs && float64(hi) > sglangBalanceRel*float64(lo) {
		return withBenefit(leastLoad(in, ReasonImbalance), in.PromptTokens)
	}
	rs := withBenefit(base(in, ReasonBestMatch), in.PromptTokens)
	best := 0.0
	for i := range rs {
		rs[i].Score = rs[i].Benefit
		best = max(best, rs[i].Benefit)
	}
	if best > sglangCacheThreshold {
		sortByScore(in, rs)
		return rs
	}
	return withBenefit(leastLoad(in, ReasonLowMatch), in.PromptTokens)
}

// AIBrixPrefixCache is AIBrix's prefix-cache routing algorithm (vllm-project/aibrix,
// pkg/plugins/gateway/algorithms/prefix_cache.go: the load-imbalance check, then the
// matched-pod selection; defaults AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT
// 8 and AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR 1). When the most and the fewest
// running requests differ by more than 8 the endpoint with the fewest wins
// (ReasonImbalance). Otherwise the endpoints holding part of the prompt are sorted by
// matched fraction (descending), then running requests (ascending), and the first whose
// running count is at most mean + 1 standard deviation (population, over all candidates)
// wins (ReasonBestMatch). If nobody holds any of the prompt (ReasonLowMatch) or every
// holder is above that bound (ReasonHoldersBusy), the fewest running wins.
//
// Stand-ins: running requests are the picker's in-flight count; the matched fraction is
// the cache index's matched tokens over the prompt's tokens (AIBrix hashes token blocks in
// its own router-side table). AIBrix picks at random among equally loaded pods; here the
// smallest address wins. After the winner the ranking follows in-flight, then address.
type AIBrixPrefixCache struct{}

// Name implements Policy.
func (AIBrixPrefixCache) Name() string { return "aibrix-prefix-cache" }

// Needs implements Policy.
func (AIBrixPrefixCache) Needs() Needs { return NeedsCache }

// Rank implements Policy.
func (AIBrixPrefixCache) Rank(in Input) []Ranked {
	lo, hi := loadRange(in.Candidates)
	if hi-lo > aibrixImbalanceAbs {
		return withBenefit(leastLoad(in, ReasonImbalance), in.PromptTokens)
	}
	var holders []Candidate
	for _, c := range in.Candidates {
		if c.Matched > 0 {
			holders = append(holders, c)
		}
	}
	if len(holders) == 0 {
		return withBenefit(leastLoad(in, ReasonLowMatch), in.PromptTokens)
	}
	m := mean(in.Candidates)
	variance := 0.0
	for _, c := range in.Candidates {
		d := float64(c.InFlight) - m
		variance += d * d
	}
	bound := m + aibrixStdDevFactor*math.Sqrt(variance/float64(len(in.Candidates)))
	slices.SortFunc(holders, func(a, b Candidate) int {
		fa, fb := matchFraction(a, in.PromptTokens), matchFraction(b, in.PromptTokens)
		if fa != fb {
			return cmp.Compare(fb, fa)
		}
		if a.InFlight != b.InFlight {
			return cmp.Compare(a.InFlight, b.InFlight)
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	rs := withBenefit(leastLoad(in, ReasonHoldersBusy), in.PromptTokens)
	for _, h := range holders {
		if float64(h.InFlight) <= bound {
			return winnerFirst(rs, h.Addr, ReasonBestMatch)
		}
	}
	return rs
}

// queueScores is the Gateway API Inference Extension's queue-scorer
// (kubernetes-sigs/gateway-api-inference-extension, pkg/epp/scheduling/framework/plugins/
// scorer/queue.go, QueueScorer.Score): (maxQ - q) / (maxQ - minQ), and 1 for everyone when
// all queues are equal. q is the in-flight count here (see GIEDefault).
func queueScores(cs []Candidate) []float64 {
	lo, hi := loadRange(cs)
	out := make([]float64, len(cs))
	for i, c := range cs {
		if hi == lo {
			out[i] = 1
			continue
		}
		out[i] = float64(hi-c.InFlight) / float64(hi-lo)
	}
	return out
}

// weighted ranks by weightQueue x queue score + weightPrefix x prefix[i], highest first,
// ties to the smallest address.
func weighted(in Input, prefix []float64) []Ranked {
	q := queueScores(in.Candidates)
	rs := withBenefit(base(in, ReasonWeighted), in.PromptTokens)
	for i := range rs {
		rs[i].Score = weightQueue*q[i] + weightPrefix*prefix[i]
	}
	sortByScore(in, rs)
	return rs
}

// GIEDefault is the Gateway API Inference Extension's default scheduling profile
// (kubernetes-sigs/gateway-api-inference-extension: queue-scorer, kv-cache-utilization-scorer
// and prefix-cache-scorer under pkg/epp/scheduling/framework/plugins/, weights 2, 2 and 3,
// then max-score-picker):
//
//	score(s) = 2 x (maxQ - q(s)) / (maxQ - minQ)     (1 when all queues are equal)
//	         + 2 x (1 - kv_utilization(s))
//	         + 3 x matched(s) / prompt_tokens
//
// Highest score wins (ReasonWeighted).
//
// Stand-ins: q is the picker's in-flight count, since the picker sees no engine's waiting
// queue; it is a stronger load signal than vLLM's waiting queue, which stays empty until an
// engine saturates. The KV-utilization term is omitted: the picker has no KV-utilization
// signal, and omitting it scores every endpoint alike on that term (adding a constant
// changes no ranking). Deriving it from in-flight would count the same load signal twice
// (in effect load x4 against prefix x3); deriving it from in-flight x prompt tokens would
// invent every other request's length. The prefix fraction is the cache index's matched
// tokens over the prompt's tokens, where GIE matches hashed blocks in its own router-side
// table. max-score-picker breaks ties at random; here the smallest address wins.
type GIEDefault struct{}

// Name implements Policy.
func (GIEDefault) Name() string { return "gie-default" }

// Needs implements Policy.
func (GIEDefault) Needs() Needs { return NeedsCache }

// Rank implements Policy.
func (GIEDefault) Rank(in Input) []Ranked {
	prefix := make([]float64, len(in.Candidates))
	for i, c := range in.Candidates {
		prefix[i] = matchFraction(c, in.PromptTokens)
	}
	return weighted(in, prefix)
}

// LLMDPrecise is llm-d's precise prefix-cache scheduling as its guide deploys it
// (llm-d/llm-d, guides/precise-prefix-cache-aware/gaie-kv-events/values.yaml: the
// precise-prefix-cache-scorer weight 3, kv-cache-utilization-scorer 2, queue-scorer 2,
// max-score-picker). The precise scorer (llm-d/llm-d-inference-scheduler, its scorer
// package, indexedScoresToNormalizedScoredPods) min-max normalizes the matched blocks over
// the endpoints that hold any: (m - min) / (max - min), 1 when every holder matches the
// same, 0 for an endpoint that holds none. So the shortest holder scores like a non-holder
// whenever holders differ.
//
//	score(s) = 3 x precise(s) + 2 x queue(s) [+ 2 x (1 - kv_utilization(s)), omitted]
//
// Highest score wins (ReasonWeighted). Stand-ins as GIEDefault: in-flight for the queue,
// the KV-utilization term omitted, ties to the smallest address. Matched tokens stand in
// for matched blocks (same normalization: the ratio of differences is unchanged).
type LLMDPrecise struct{}

// Name implements Policy.
func (LLMDPrecise) Name() string { return "llmd-precise" }

// Needs implements Policy.
func (LLMDPrecise) Needs() Needs { return NeedsCache }

// Rank implements Policy.
func (LLMDPrecise) Rank(in Input) []Ranked {
	lo, hi, held := 0, 0, false
	for _, c := range in.Candidates {
		m := min(c.Matched, in.PromptTokens)
		if m <= 0 {
			continue
		}
		if !held || m < lo {
			lo = m
		}
		if !held || m > hi {
			hi = m
		}
		held = true
	}
	prefix := make([]float64, len(in.Candidates))
	for i, c := range in.Candidates {
		m := min(c.Matched, in.PromptTokens)
		switch {
		case m <= 0:
			prefix[i] = 0
		case hi == lo:
			prefix[i] = 1
		default:
			prefix[i] = float64(m-lo) / float64(hi-lo)
		}
	}
	return weighted(in, prefix)
}

// DynamoKV is NVIDIA Dynamo's KV router cost (ai-dynamo/dynamo,
// lib/llm/src/kv_router/scheduler.rs, DefaultWorkerSelector::select_worker; defaults
// --kv-overlap-score-weight 1, --router-temperature 0, i.e. no softmax sampling):
//
//	prefill_blocks(s) = (prompt_tokens - matched(s)) / 16        (fractional, as upstream)
//	decode_blocks(s)  = (inflight(s) + 1) x ceil(prompt_tokens / 16)
//	cost(s)           = 1 x prefill_blocks(s) + decode_blocks(s)
//
// Lowest cost wins (ReasonLowestCost), ties to the smallest address. Upstream divides the
// uncached tokens by the block size in floating point, so no ceiling is applied to them.
//
// Stand-ins: Dynamo counts each worker's active KV blocks (every in-flight request's
// prompt and generated tokens) plus this request's blocks. The picker books requests, not
// their sizes, so each in-flight request is taken to be as long as this prompt; the +1 is
// this request's own blocks (a constant shift, kept so the cost reads as upstream's). The
// worker's queued prefill tokens, which upstream adds to the prefill term, are unknown and
// left out. A request without token ids counts as one block, so the load term still
// spreads it.
type DynamoKV struct{}

// Name implements Policy.
func (DynamoKV) Name() string { return "dynamo-kv" }

// Needs implements Policy.
func (DynamoKV) Needs() Needs { return NeedsCache }

// Rank implements Policy. Score is -cost.
func (DynamoKV) Rank(in Input) []Ranked {
	reqBlocks := max((in.PromptTokens+dynamoBlockSize-1)/dynamoBlockSize, 1)
	rs := withBenefit(base(in, ReasonLowestCost), in.PromptTokens)
	for i := range rs {
		uncached := in.PromptTokens - min(max(rs[i].Matched, 0), in.PromptTokens)
		prefill := float64(uncached) / dynamoBlockSize
		decode := float64((rs[i].InFlight + 1) * reqBlocks)
		rs[i].Score = -(dynamoOverlapWeight*prefill + decode)
	}
	sortByScore(in, rs)
	return rs
}
