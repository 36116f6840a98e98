package scoring

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// Peer policies: other projects' published routing rules, re-stated over the signals each
// reads (the matched prefix, the router's in-flight count, the engines' scraped waiting queue
// and KV usage, the router's own account of its requests' blocks and prefill tokens), so the
// bench can run every known idea on the same fleet. Each doc comment cites its source and
// names every stand-in; where the source breaks ties at random, ties here go to the smallest
// address so runs reproduce (llmd-sticky: see there). docs/decisions/1300-peer-policies.md
// and 1350-peers-real-inputs.md give the reasons.

// Defaults of the peers, as their sources publish them.
const (
	sglangBalanceAbs     = 64  // SGLang --balance-abs-threshold
	sglangBalanceRel     = 1.5 // SGLang --balance-rel-threshold
	sglangCacheThreshold = 0.3 // SGLang --cache-threshold

	aibrixImbalanceAbs = 8 // AIBrix AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT
	aibrixStdDevFactor = 1 // AIBrix AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR

	weightQueue  = 2.0 // queue-scorer (GIE default profile; llm-d precise guide)
	weightKV     = 2.0 // kv-cache-utilization-scorer (both)
	weightPrefix = 3.0 // prefix-cache-scorer / precise-prefix-cache-scorer

	dynamoBlockSize     = 16  // Dynamo's KV block, in tokens (the engine's; vLLM's default)
	dynamoOverlapWeight = 1.0 // Dynamo --kv-overlap-score-weight

	llmdAffinity       = 0.80    // prefix-cache-affinity-filter affinityThreshold (optimized-baseline guide)
	llmdTokenGate      = 286720  // prefix-cache-affinity-filter maxTokensInFlightPenalty (optimized-baseline guide)
	llmdQueueThreshold = 4194304 // token-load-scorer queueThresholdTokens default
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
// sgl-model-gateway/src/policies/cache_aware.rs, CacheAwarePolicy::select_worker, formerly
// sgl-router/src/policies/cache_aware.rs; defaults from the router's --cache-threshold 0.3,
// --balance-abs-threshold 64, --balance-rel-threshold 1.5). The fleet counts as imbalanced
// when the most loaded endpoint has more than BalanceAbs requests over the least loaded
// AND more than BalanceRel times its load; then the least loaded wins (ReasonImbalance).
// Otherwise the endpoint with the longest matched prefix wins if that match covers more
// than CacheThreshold of the prompt (ReasonBestMatch); below that the least loaded wins
// (ReasonLowMatch). Zero fields take the defaults.
//
// WorkerQueueLimit is the router's --worker-queue-limit (sgl-project/sglang pull request
// 39168): an endpoint whose engine already has that many requests waiting (scraped
// vllm:num_requests_waiting, Candidate.Engine) leaves the cache-affinity candidates; the
// request goes to the endpoint with the longest match among the others if that match still
// clears the threshold, else to the least loaded endpoint that is not queueing
// (ReasonQueueGated); an endpoint whose queue is not known is admitted, and when every
// endpoint is gated the least loaded of all wins. 0 leaves the gate off, as a router started
// without the flag.
//
// Stand-ins: load is the picker's in-flight count (SGLang's Worker::load, the requests the
// router has outstanding on each worker: the same quantity). The match is the cache index's
// matched tokens over the prompt's tokens, where SGLang matches characters in its own
// router-side radix tree of the prompts it routed. On a low match the version read routes
// to the least loaded worker (its doc comment still says the smallest tree; the picker has
// no tree, and the least loaded is what the code does). Ties go to the smallest address;
// SGLang takes the first in its own order.
type SGLangCacheAware struct {
	BalanceAbs       int
	BalanceRel       float64
	CacheThreshold   float64
	WorkerQueueLimit int
}

// Name implements Policy.
func (SGLangCacheAware) Name() string { return "sglang-cache-aware" }

// Needs implements Policy: the engines' metrics too when the queue gate is on.
func (p SGLangCacheAware) Needs() Needs {
	if p.WorkerQueueLimit > 0 {
		return NeedsCache | NeedsEngineMetrics
	}
	return NeedsCache
}

// admits is the queue gate: an engine with fewer than limit requests waiting, or whose
// queue is not known.
func (p SGLangCacheAware) admits(c Candidate) bool {
	return p.WorkerQueueLimit <= 0 || !c.Engine.Known || c.Engine.Waiting < p.WorkerQueueLimit
}

// Rank implements Policy. In the match branch the ranking is by match, then address; in
// the load branches by in-flight, then address.
func (p SGLangCacheAware) Rank(in Input) []Ranked {
	abs, rel, cache := p.BalanceAbs, p.BalanceRel, p.CacheThreshold
	if abs == 0 {
		abs = sglangBalanceAbs
	}
	if rel == 0 {
		rel = sglangBalanceRel
	}
	if cache == 0 {
		cache = sglangCacheThreshold
	}
	lo, hi := loadRange(in.Candidates)
	if hi-lo > abs && float64(hi) > rel*float64(lo) {
		return withBenefit(leastLoad(in, ReasonImbalance), in.PromptTokens)
	}
	rs := withBenefit(base(in, ReasonBestMatch), in.PromptTokens)
	best, bestAdmitted, gated, admitted := 0.0, 0.0, false, 0
	for i := range rs {
		rs[i].Score = rs[i].Benefit
		best = max(best, rs[i].Benefit)
		if p.admits(in.Candidates[i]) {
			bestAdmitted = max(bestAdmitted, rs[i].Benefit)
			admitted++
		} else if rs[i].Benefit > cache {
			gated = true
		}
	}
	if best <= cache {
		return withBenefit(leastLoad(in, ReasonLowMatch), in.PromptTokens)
	}
	if !gated || admitted == 0 {
		sortByScore(in, rs)
		return rs
	}
	// The queue gate: the gated endpoints rank after the admitted ones.
	for i := range rs {
		if !p.admits(in.Candidates[i]) {
			rs[i].Score -= 2
		}
	}
	if bestAdmitted > cache {
		sortByScore(in, rs)
		return rs
	}
	rs = withBenefit(base(in, ReasonQueueGated), in.PromptTokens) // in candidate order
	for i := range rs {
		rs[i].Score = -float64(rs[i].InFlight)
		if !p.admits(in.Candidates[i]) {
			rs[i].Score -= math.MaxInt32
		}
	}
	sortByScore(in, rs)
	return rs
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
// (kubernetes-sigs/gateway-api-inference-extension v1.5.0, pkg/epp/scheduling/framework/
// plugins/scorer/queue.go, QueueScorer.Score): (maxQ - q) / (maxQ - minQ), and 1 for
// everyone when all queues are equal, where q is the engine's scraped
// vllm:num_requests_waiting (Candidate.Engine.Waiting; an engine not yet scraped reads 0,
// as GIE's metrics of a new pod do).
func queueScores(cs []Candidate) []float64 {
	lo, hi := 0, 0
	for i, c := range cs {
		if i == 0 || c.Engine.Waiting < lo {
			lo = c.Engine.Waiting
		}
		if i == 0 || c.Engine.Waiting > hi {
			hi = c.Engine.Waiting
		}
	}
	out := make([]float64, len(cs))
	for i, c := range cs {
		if hi == lo {
			out[i] = 1
			continue
		}
		out[i] = float64(hi-c.Engine.Waiting) / float64(hi-lo)
	}
	return out
}

// weighted ranks by weightQueue x queue score + weightKV x (1 - KV usage) + weightPrefix x
// prefix[i], highest first, ties to the smallest address. The KV usage is the scraped
// vllm:kv_cache_usage_perc (0 when not known, as GIE reads a pod it has not scraped).
func weighted(in Input, prefix []float64) []Ranked {
	q := queueScores(in.Candidates)
	rs := withBenefit(base(in, ReasonWeighted), in.PromptTokens)
	for i := range rs {
		kv := 1 - min(max(in.Candidates[i].Engine.KVUsage, 0), 1)
		rs[i].Score = weightQueue*q[i] + weightKV*kv + weightPrefix*prefix[i]
	}
	sortByScore(in, rs)
	return rs
}

// GIEDefault is the Gateway API Inference Extension's default scheduling profile
// (kubernetes-sigs/gateway-api-inference-extension v1.5.0, pkg/epp/config/loader/defaults.go:
// queue-scorer, kv-cache-utilization-scorer and prefix-cache-scorer, weights 2, 2 and 3,
// then max-score-picker), fed the signals GIE reads:
//
//	score(s) = 2 x (maxQ - q(s)) / (maxQ - minQ)     (1 when all queues are equal)
//	         + 2 x (1 - kv_usage(s))
//	         + 3 x matched(s) / prompt_tokens
//
// q is the engine's vllm:num_requests_waiting and kv_usage its vllm:kv_cache_usage_perc, both
// as last scraped (Candidate.Engine; the picker scrapes at GIE's default 50 ms refresh). Highest
// score wins (ReasonWeighted).
//
// Stand-ins: the prefix fraction is the cache index's matched tokens over the prompt's
// tokens, where GIE matches hashed 64-character blocks in its own router-side table of the
// prompts it routed (the bench's `gie` arm runs GIE's own code with that table).
// max-score-picker breaks ties at random; here the smallest address wins.
type GIEDefault struct{}

// Name implements Policy.
func (GIEDefault) Name() string { return "gie-default" }

// Needs implements Policy.
func (GIEDefault) Needs() Needs { return NeedsCache | NeedsEngineMetrics }

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
//	score(s) = 3 x precise(s) + 2 x queue(s) + 2 x (1 - kv_usage(s))
//
// queue and kv_usage as GIEDefault (scraped vllm:num_requests_waiting and
// vllm:kv_cache_usage_perc). Highest score wins (ReasonWeighted). The precise scorer reads
// the engines' KV events, as the picker's cache index does; matched tokens stand in for
// matched blocks (same normalization: the ratio of differences is unchanged). Ties to the
// smallest address.
type LLMDPrecise struct{}

// Name implements Policy.
func (LLMDPrecise) Name() string { return "llmd-precise" }

// Needs implements Policy.
func (LLMDPrecise) Needs() Needs { return NeedsCache | NeedsEngineMetrics }

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
// lib/llm/src/kv_router/scheduler.rs, DefaultWorkerSelector::select_worker, over the
// per-worker account of lib/llm/src/kv_router/sequence.rs, ActiveSequences; defaults
// --kv-overlap-score-weight 1, --router-temperature 0, i.e. no softmax sampling):
//
//	prefill_blocks(s) = (prompt_tokens - 16 x floor(matched(s)/16) + queued_prefill(s)) / 16
//	decode_blocks(s)  = new_blocks(s) + active_blocks(s)
//	cost(s)           = 1 x prefill_blocks(s) + decode_blocks(s)
//
// Lowest cost wins (ReasonLowestCost), ties to the smallest address (upstream breaks ties
// by tree size, then at random). active_blocks is the number of distinct 16-token blocks of
// the prompts the router has in flight on the worker, a block shared by several requests
// counted once; new_blocks the prompt's full blocks not among them; queued_prefill the
// uncached prompt tokens of the worker's requests not yet past their first token
// (Candidate.ActiveBlocks, NewBlocks, InFlightPrefill: the picker keeps this account as
// Dynamo's router does, adding a request when it routes it, dropping its prefill tokens at
// its first token and its blocks when it ends). The prefill term is fractional, as
// upstream's division in floating point. The match is the cache index's (Dynamo's indexer
// reads the engines' KV events too).
type DynamoKV struct{}

// Name implements Policy.
func (DynamoKV) Name() string { return "dynamo-kv" }

// Needs implements Policy.
func (DynamoKV) Needs() Needs { return NeedsCache | NeedsInFlightSizes }

// Rank implements Policy. Score is -cost.
func (DynamoKV) Rank(in Input) []Ranked {
	rs := withBenefit(base(in, ReasonLowestCost), in.PromptTokens)
	for i := range rs {
		c := in.Candidates[i]
		overlap := min(max(c.Matched, 0), in.PromptTokens) / dynamoBlockSize * dynamoBlockSize
		prefill := float64(in.PromptTokens-overlap+max(c.InFlightPrefill, 0)) / dynamoBlockSize
		decode := float64(max(c.NewBlocks, 0) + max(c.ActiveBlocks, 0))
		rs[i].Score = -(dynamoOverlapWeight*prefill + decode)
	}
	sortByScore(in, rs)
	return rs
}

// LLMDSticky is llm-d's "sticky until saturated" profile, the scheduling profile of its
// optimized-baseline guide (llm-d/llm-d, guides/optimized-baseline/router/
// optimized-baseline.values.yaml): the prefix-cache-affinity-filter (llm-d/llm-d-router,
// pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity/plugin.go: affinityThreshold
// 0.80, maxTokensInFlightPenalty 286720, the TTFT gate off) and then the token-load-scorer
// (.../scheduling/scorer/tokenload: 1 - min(1, tokens / 4194304)), max-score picker.
//
// The filter keeps the sticky endpoints, those holding at least 0.80 of the prompt, unless
// there are none, or the least loaded sticky endpoint has more than 286720 in-flight tokens
// over the least loaded other one (then all stay: ReasonUnstuck). Among those kept, the
// fewest in-flight tokens wins (ReasonSticky when narrowed, ReasonTokenLoad when not).
// In-flight tokens are llm-d's inflight-load-producer's: the uncached prompt tokens of the
// requests routed to the endpoint, released at their first response chunk
// (Candidate.InFlightPrefill, kept by the picker as llm-d does). The share held is the cache
// index's matched tokens over the prompt's, where llm-d's approx-prefix-cache-producer
// matches hashed blocks in a router-side table of the prompts it routed.
//
// Ties: llm-d's max-score picker chooses at random, and ties are the rule here (every idle
// endpoint scores 1); ties go by a hash of the decision time and the address, which spreads
// them like a random choice and repeats in virtual time.
type LLMDSticky struct {
	TokenGate int // maxTokensInFlightPenalty; 0: the guide's 286720
}

// Name implements Policy.
func (LLMDSticky) Name() string { return "llmd-sticky" }

// Needs implements Policy.
func (LLMDSticky) Needs() Needs { return NeedsCache | NeedsInFlightSizes }

// Rank implements Policy. Score is the token-load score; the endpoints the filter dropped
// follow the kept ones, ranked alike, with their scores less 1.
func (p LLMDSticky) Rank(in Input) []Ranked {
	gate := p.TokenGate
	if gate == 0 {
		gate = llmdTokenGate
	}
	sticky := make([]bool, len(in.Candidates))
	bestSticky, bestOther, nSticky := math.MaxInt, math.MaxInt, 0
	for i, c := range in.Candidates {
		tokens := max(c.InFlightPrefill, 0)
		if in.PromptTokens > 0 && matchFraction(c, in.PromptTokens) >= llmdAffinity {
			sticky[i] = true
			nSticky++
			bestSticky = min(bestSticky, tokens)
		} else {
			bestOther = min(bestOther, tokens)
		}
	}
	reason := ReasonSticky
	switch {
	case nSticky == 0:
		reason = ReasonTokenLoad
	case nSticky < len(in.Candidates) && bestSticky-bestOther > gate:
		reason = ReasonUnstuck
	}
	rs := withBenefit(base(in, reason), in.PromptTokens)
	tie := make(map[string]uint64, len(rs))
	for i := range rs {
		rs[i].Score = 1 - min(1, float64(max(in.Candidates[i].InFlightPrefill, 0))/llmdQueueThreshold)
		if reason == ReasonSticky && !sticky[i] {
			rs[i].Score--
		}
		tie[rs[i].Addr] = tieHash(in.Now.UnixNano(), rs[i].Addr)
	}
	slices.SortFunc(rs, func(a, b Ranked) int {
		if a.Score != b.Score {
			return cmp.Compare(b.Score, a.Score)
		}
		if ta, tb := tie[a.Addr], tie[b.Addr]; ta != tb {
			return cmp.Compare(ta, tb)
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	return rs
}

// tieHash mixes a decision time and an address into a tie-break key (FNV-1a, then a
// splitmix finalizer).
func tieHash(now int64, addr string) uint64 {
	h := uint64(14695981039346656037) ^ uint64(now)
	h *= 1099511628211
	for i := 0; i < len(addr); i++ {
		h ^= uint64(addr[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}
