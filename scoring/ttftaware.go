package scoring

import (
	"math"
	"strconv"
	"time"
)

// TTFTAware estimates each candidate's time to first token for the request from the
// engine's physics and picks the lowest, with the two valves the field converged on:
//
//		ahead(s)   = prefill(s) x uncached(s)                  prefill tokens queued on s
//		tokens(s)  = ahead(s) + miss(s),  miss(s) = prompt - max(matched(s), presumed(s))
//		steps(s)   = max(1, ceil(tokens(s) / StepTokens))       engine steps until the first token
//		admit(s)   = AdmitCost + (prefill(s) + decode(s)) x AdmitSeqCost    one admission
//		est(s)     = (prefill(s) + 1) x admit(s) + tokens(s) x TokenCost
//		             + steps(s) x (StepCost + decode(s) x SeqStepCost) + running(s) + kvwait(s)
//		running(s) = (StepCost + decode(s) x SeqStepCost) / 2 + decode(s) x OutputCost   when decode(s) > 0
//		queued(s)  = min((prefill(s) x admit(s) + ahead(s) x TokenCost) x slowdown(s),   est(s)'s
//		                 max(0, predicted(s) x drain(s) - (now - booked(s))))   queued part: the first
//		             term alone until a first token on s has been observed, when prefill(s) is 0,
//		             or when drain(s) >= 1
//		cost(s)    = est(s) + (miss(s) - least miss) x TokenCost x prefill(s)   sticky until saturated
//		           = miss(s) first, est(s) breaking ties                       when every candidate is saturated
//		           = est(s) - (miss(s) - least miss) x TokenCost                when a copy of the prefix on s pays
//		           = est(s)                              otherwise when the holding is only presumed
//
//	  - prefill(s), decode(s): this picker's requests on s before and past their first token.
//	    uncached(s) is the mean uncached prompt of the requests booked on s lately (the caller
//	    records each with State.Uncached): the work a queued request still holds.
//	  - presumed(s): when the cache index shows no candidate holding any of the prompt (an
//	    engine without a CPU tier publishes no KV events; a prefix just prefilled is not yet
//	    published), the last two engines its prefix key (the first 256 tokens) was routed
//	    to are each presumed to hold the shorter of the prompt routed there and this one,
//	    until its free KV has been allocated again since (presumedHeld); elsewhere 0. The
//	    caller records each routing with State.RoutedPrompt (State.Routed when the prompt's
//	    token ids are not known). While the index has never shown a holding (a fleet that
//	    publishes no KV events) and the prompt's token ids are known, s is instead presumed
//	    to hold the prompt's leading 256-token chunks that were routed there and are still
//	    held, whichever prompts they were part of (presumeChunks): every engine a shared
//	    system prompt went to, not only the last two, and of another session's prompt only
//	    the chunks this one shares (decision 1670). A chunk is held until the distinct prompt
//	    tokens routed to s since it was (an LRU of what the picker sent there, chunkLRU: a
//	    prompt sent again counts once, a hit counts too) fill s's KV pool, as vLLM's LRU
//	    of blocks evicts it (holdsChunk; decision 1690). A last route this prompt starts
//	    with still counts whole while its full chunks are held.
//	  - queued(s), the queue's age (decisions 1738, 1748): in vLLM's FIFO the work ahead of a new
//	    request ends when the last request booked on s has its first token, which the picker
//	    predicted when it booked it (booked(s), predicted(s): its estimate with the queue
//	    charged in full, State.Pending). drain(s) is s's own measured ratio of observed to
//	    predicted times to first token of the bookings that had it (State.drain reads the
//	    first tokens from the fall of prefill(s)), so the prediction is aged by the clock at
//	    the rate s actually drains. Where bursts drain faster than predicted (one engine
//	    speed, held-out 20261208 h10: 0.078 s against 0.140 s) the charge follows the
//	    queued request's age, as kvaware's rotation does. Where admissions, chunked long
//	    prompts or KV waits make s drain slower than predicted (drain(s) >= 1: 2-7x on the
//	    cells 1724's cap lost, decision 1734) its predictions are known short, and so is any
//	    age read from them: the full charge stands and the cap is not applied (aging by a
//	    ratio above 1 lost 20261206 h03 +76% at seeds 11-20, 1738). The fleet's mean queued
//	    wait in the copy rule (saving) reads the full charge.
//	  - running(s) is what a decoding batch adds beyond the steps the prompt is in: a prompt
//	    arriving while s runs a step waits for the rest of it, on average half of it, and its
//	    first token leaves the API server after the step's other decode(s) tokens, OutputCost
//	    each. Without it a decoding sequence cost a tenth of a queued prefill's charge per
//	    0.65 ms, and ttftaware sent bursts to the engines with the most sequences decoding
//	    (decision 1708: held-out 20261208 h10 measured 1.6 ms of TTFT per decoding sequence).
//	    It is this request's wait, not a copy's: hitTime, what a copy saves each later
//	    request of its family, leaves it out (the step in progress when a later request
//	    arrives is not today's; counting it there lost held-out 20261207 h06, decision 1712).
//	  - kvwait(s) is the wait for KV capacity (KVWait): on a decode-bound engine the running
//	    sequences fill the KV pool, and a new prompt waits for some of them to finish. The
//	    prompt needs no new blocks for what a sequence running on s already holds
//	    (sharedRunning: the prefix key's last request, or the last before it to another
//	    engine, routed to s less than its measured decode duration ago; decision 1671), which
//	    is all this prompt holds there only when the prompt continues it (a session's next
//	    turn), and else no more than the key's shortest prompt (another session on the same
//	    system prompt shares that, not this session's history; decision 1694).
//	  - Every term of est(s) but kvwait(s), and the move's recompute charge below, is
//	    multiplied by slowdown(s), the engine's measured prefill time over the model's
//	    (PrefillSlowdown; 1 until measured): a slower GPU prefills and steps slower.
//	  - Sticky until saturated: moving a prompt off the engine that holds the most of it makes
//	    the fleet compute the difference again, work the requests that queue behind it on the
//	    new engine wait for. In a queue, a job of x seconds delays the jobs after it by x
//	    times the mean number in the system (M/M/1: rho/(1-rho)), and prefill(s) is that
//	    number now; so the move is charged the recompute prefill(s) times more, beyond this
//	    request's own wait. An idle engine takes a moved prompt at its own cost; a holder
//	    is left when its queue outweighs the recompute its move imposes. A holding that is
//	    only presumed (the index shows the prompt nowhere) charges no move: the recompute
//	    is a guess there, and multiplying a guess by the destination's queue made the
//	    picker's own routing history a penalty prefill(s) times larger than the request's
//	    own estimate of it (decision 1613). The presumption still counts in est(s), and
//	    such a holding may still be copied (below).
//	  - Fleet-saturation floor: an engine is saturated when the prefill queued on it
//	    (ahead(s)) fills at least one step's token budget, so it cannot start a new prompt in
//	    its next step, or when it has no KV capacity for the prompt (kvwait(s) > 0). When
//	    every candidate is saturated nothing is diverted: a move then only adds work to a
//	    fleet that has none to spare, so the prompt goes where most of it is held (its
//	    lowest miss), the estimate deciding among equals.
//	  - A copy of a hot prefix (decisions 1614, 1635): a second holder lets the prefix's later
//	    requests choose the less queued of two, and one on a faster engine serves each of
//	    them faster (the fastest holder's hitTime less the copy's: a GPU the warm-up placed
//	    the family on before any speed was measured costs every later request its slowdown;
//	    decision 1704), so a candidate holding none of the prompt and with nothing in
//	    prefill, when no candidate is saturated, is scored as if it held the prompt when
//	    the copy saves its family more wait than it costs (replicaPays). (A
//	    candidate holding the prompt's start lacks only what this request does not share
//	    with its family, a conversation's history after its system prompt: no copy.) Over
//	    a holding that is only presumed, a copy is made only when the prompt's token ids
//	    (Input.Tokens) show it is another request of the family of each prompt presumed
//	    held (pastRoute.repeat): it does not continue that prompt, as a session's next turn
//	    does, whose later turns continue only this one and gain nothing from a second
//	    copy (decision 1650). Nor is a prompt copied that its holder holds past its family's
//	    shortest prompt (State's shortest): a session's later turn, whose move recomputes
//	    the session's history, which only its own later turns share; the family's prefix
//	    is copied when one of its first turns moves (decisions 1716, 1720: such moves lost
//	    held-out 20261206 h03, a 6-turn chat on a 98%-loaded fleet). Its recompute x costs
//
//		copy(s)  = x x (1 + rate/engines x x/2) / (1 - busy) + x / (1 - evicted)
//
//	    its own prefill and the requests that arrive at s during it (rate/engines x x of
//	    them, each waiting x/2 on average), the queue growing behind them as an M/M/1
//	    queue's does at the fleet's prefill utilization busy; and the other prefixes' cached
//	    blocks it evicts, recomputed once, and again as often as the fleet's bookings are
//	    recomputes of evicted prompts (evicted of their uncached tokens: 1 + evicted +
//	    evicted^2 + ...). rate is the fleet's bookings per second (State, decayed over
//	    HotTau), busy it over the bookings the engines can prefill a second (one admission
//	    and the mean uncached prompt each, times the slowdown), evicted the share of the
//	    uncached tokens booked where their prefix was last routed beyond the least it ever
//	    booked (its own suffix). At busy or evicted 1 nothing is copied: past capacity a
//	    recompute is never won back, and a pool that evicts what it will need repays none.
//	    Nor is anything copied before the rate is measured, until the picker's first
//	    booking is HotTau old: a rate decayed over HotTau that has counted for T seconds
//	    holds 1 - e^(-T/HotTau) of its window's bookings (a sixth at 2 s), so a picker
//	    just started reads its fleet idle and prices a copy far too low (decision 1660).
//	    Under the same gates a copy is also made, whatever replicaPays says, when its family
//	    keeps it referenced, moves at least one of the family's sequences off each holder and
//	    relieves a holder busier than c by the family's share (referencedCopy: by Little's
//	    law the family runs pace/gap sequences at once, at least one on each holder after
//	    the copy, so vLLM never frees the copy's blocks and it is paid once; replicaPays
//	    prices one LRU cycle of life and the queue at the instant, and left two families on
//	    one engine for good on held-out 20261218 h05), and, on a fleet without KV events, it
//	    fits beside the prompts routed to c (fitsBesideRouted: an evicted prefix there is
//	    computed again; decision 1732). A decision won by a copy says which rule made it:
//	    ReasonReplica (replicaPays) or ReasonReferencedCopy.
//
// KVWait reads the engines' scraped KV usage, running and waiting counts
// (Candidate.Engine); an engine not scraped waits for nothing.
//
// The constants are the calibrated A10 engine model's (bench/sim DefaultConfig,
// docs/bench/simulator.md); none was fitted on a workload. Lowest cost wins. Among equal
// costs the request fares the same anywhere, and what differs is what its placement
// evicts: the tie goes to the candidate with the fewest uncached prompt tokens booked on
// it (State.Uncached), whose caches hold the least of other prompts, then to the smallest
// address (decision 1695). Scores are -cost in seconds.
type TTFTAware struct {
	state *State
}

// TTFTAware's constants: the engine's physics on the published testbed (Qwen2.5-3B on an
// NVIDIA A10 under vLLM V1; bench/sim.DefaultConfig).
const (
	// TokenCost is one prompt token's prefill compute: 2 x 3.09e9 FLOP at 25% of the A10's
	// 125 TFLOP/s bf16 peak.
	TokenCost = 198 * time.Microsecond
	// AdmitCost is the host time an engine step spends admitting one request (LMCache
	// lookup, load and save set-up, input preparation).
	AdmitCost = 25 * time.Millisecond
	// AdmitSeqCost is what each sequence in the step adds to an admission (the batch is
	// prepared again around the new request).
	AdmitSeqCost = 150 * time.Microsecond
	// StepCost is one engine step's fixed time: 6 ms of scheduling, launch and sampling,
	// and the 6.2 GB of weights read at 480 GB/s (80% of 600 GB/s), 12.9 ms.
	StepCost = 19 * time.Millisecond
	// SeqStepCost is what each decoding sequence adds to every step.
	SeqStepCost = 500 * time.Microsecond
	// OutputCost is the API server's time to stream one token of a step's output
	// (detokenizing and sending it): the step's tokens leave one after another, so a
	// first token waits for the others of its step.
	OutputCost = 310 * time.Microsecond
	// StepTokens is the tokens one step prefills (vLLM's max_num_batched_tokens).
	StepTokens = 2048
	// KVPoolTokens is the tokens of KV the engine's GPU pool holds (vLLM's num_gpu_blocks
	// x block_size: 6,187 blocks of 16 on the A10 at 0.9 GPU memory utilization), assumed
	// for an engine that does not export vllm:cache_config_info.
	KVPoolTokens = 99000
)

// Name implements Policy.
func (*TTFTAware) Name() string { return "ttftaware" }

// Needs implements Policy.
func (*TTFTAware) Needs() Needs {
	return NeedsCache | NeedsPrefixKey | NeedsUncached | NeedsEngineMetrics | NeedsTokens
}

// AppendTerms implements TermsExplainer: the estimated time to first token, the prefill
// queued ahead as charged (capped by the queue's age, queued(s)) and in full, the engine's
// measured drain ratio the cap was aged by (0: none measured), the wait for KV capacity,
// in seconds, the prompt tokens presumed held from the routing history, and the engine's
// measured prefill slowdown the estimate was scaled by.
func (*TTFTAware) AppendTerms(b []byte, r Ranked) []byte {
	b = append(b, " est_ttft="...)
	b = strconv.AppendFloat(b, r.Estimate, 'f', 3, 64)
	b = append(b, " queued="...)
	b = strconv.AppendFloat(b, r.Load, 'f', 3, 64)
	b = append(b, " queued_full="...)
	b = strconv.AppendFloat(b, r.QueuedFull, 'f', 3, 64)
	b = append(b, " drain="...)
	b = strconv.AppendFloat(b, r.Drain, 'f', 2, 64)
	b = append(b, " kv_wait="...)
	b = strconv.AppendFloat(b, r.KVWait, 'f', 3, 64)
	b = append(b, " presumed="...)
	b = strconv.AppendInt(b, int64(r.Presumed), 10)
	b = append(b, " slowdown="...)
	return strconv.AppendFloat(b, r.Slowdown, 'f', 2, 64)
}

// KVWait is how long a prompt of prompt tokens needing new KV blocks (TTFTAware passes
// the prompt less what a running sequence there shares, sharedRunning) waits for KV
// capacity on an engine, in seconds, from its scraped metrics, the picker's requests
// decoding there and their mean decode duration (pace):
//
//	pool    = Engine.KVPoolTokens, or KVPoolTokens when the   the engine's GPU KV pool in tokens
//	          engine does not export it
//	used    = min(KVUsage x pool + decode x steps, pool)      KV held, grown by one token per
//	                                                          decoding sequence and step since the
//	                                                          scrape; never more than the pool (a
//	                                                          full engine preempts instead)
//	need    = prompt + Waiting x used / max(1, Running)       the prompt's blocks and those of the
//	                                                          requests waiting ahead (an average footprint each)
//	deficit = need - (pool - used)
//	k       = ceil(deficit / (used / n)),  n = max(1, Running)  the sequences that must finish
//	kvwait  = pace x k / (n + 1)  when deficit > 0, else 0     the k-th of n to finish
//
// steps counts the engine steps from the scrape until the prompt's admission (the scrape's
// age, and the prompt's own steps, at StepCost + decode x SeqStepCost each). A prompt that
// fits waits for nothing; one that does not waits until enough running sequences finish to
// free the deficit. A sequence frees its KV all at once when it finishes, not token by
// token: each holds used/n tokens, and with their remaining times spread evenly over pace
// the k-th finishes after pace x k/(n+1) (the mean of the k-th of n uniform times). A
// deficit of one token thus costs the wait for a whole sequence: vLLM admits a prompt with
// blocks for its first chunk only, and when the running sequences' growth leaves its later
// chunks none it preempts the newest request, this one, which then waits and recomputes
// (decision 1606). An engine not scraped
// (Engine.Known false), holding no KV, or whose pace is not measured waits for nothing.
func KVWait(c Candidate, prompt int, steps float64) float64 {
	e := c.Engine
	if !e.Known || c.DecodePace <= 0 {
		return 0
	}
	step := StepCost.Seconds() + float64(max(c.Decode, 0))*SeqStepCost.Seconds()
	grown := float64(max(c.Decode, 0)) * (e.Age.Seconds()/step + steps)
	pool := kvPool(e)
	used := min(min(max(e.KVUsage, 0), 1)*pool+grown, pool)
	if used <= 0 {
		return 0
	}
	need := float64(max(prompt, 0)) + float64(max(e.Waiting, 0))*used/float64(max(e.Running, 1))
	deficit := need - (pool - used)
	if deficit <= 0 {
		return 0
	}
	n := float64(max(e.Running, 1))
	return c.DecodePace.Seconds() * math.Ceil(deficit*n/used) / (n + 1)
}

// sharedRunning is the prompt tokens whose KV blocks a sequence running on c already
// holds: vLLM shares with a new request the cached prefix blocks a running request
// references, allocating nothing for them. r is where the prompt's prefix key was routed
// last, and last before that to another endpoint; a request of the key routed to c less
// than c's measured decode duration (DecodePace) before now still runs there (its queue
// and prefill came first). It holds of this prompt what both share: the held tokens
// (matched in the index or presumed) up to its length when this prompt continues it (a
// session's next turn, known from the token ids), else up to the key's shortest prompt
// too, all a sibling of the family (another session on the same system prompt) can
// share with it; its cached history is referenced by no running request and takes free
// blocks (decision 1694). Else 0.
func sharedRunning(c Candidate, held int, r routed, tokens []uint32, now time.Time) int {
	shared := 0
	for _, rt := range [2]route{r.route, r.prev} {
		if rt.addr != c.Addr || c.DecodePace <= 0 || now.Sub(rt.at) >= c.DecodePace {
			continue
		}
		n := min(held, rt.tokens)
		if rt.tail == 0 || tailHash(tokens, rt.tokens) != rt.tail {
			n = min(n, r.shortest)
		}
		shared = max(shared, n)
	}
	return max(shared, 0)
}

// Rank implements Policy.
func (p *TTFTAware) Rank(in Input) []Ranked {
	rs := base(in, ReasonLowestTTFT)
	if len(rs) == 0 {
		return rs
	}
	tok := TokenCost.Seconds()
	step, seq := StepCost.Seconds(), SeqStepCost.Seconds()
	leastMiss := math.MaxInt
	saturated := true
	spare := true     // no candidate is saturated
	presumed := false // some candidate's holding is presumed, not seen
	lineage := false  // and this prompt may continue the one routed there (a session's next turn)
	p.state.mu.Lock()
	last, lastOK := p.state.recent[in.PrefixKey] // never key 0: routed records none
	routes := p.state.presumption(in, last, lastOK)
	between, gap := spacing(last, lastOK)
	rate, perBooking, evicted := p.state.offered(in.Now)
	measured := p.state.offeredMeasured(in.Now)
	chunked := p.state.presumeChunks(in, rs)
	for i, c := range in.Candidates {
		byChunks := rs[i].Presumed
		for _, r := range routes {
			if r.tokens > 0 && r.addr == c.Addr && presumedHeld(c, r.since) {
				if !chunked || r.starts && routeChunksHeld(byChunks, r.tokens) {
					rs[i].Presumed = max(rs[i].Presumed, min(r.tokens, in.PromptTokens))
				}
				lineage = lineage || !r.repeat
			}
		}
		presumed = presumed || rs[i].Presumed > 0
		miss := missOf(in.PromptTokens, c.Matched, rs[i].Presumed)
		leastMiss = min(leastMiss, miss)
		ahead := 0.0
		if c.Prefill > 0 {
			ahead = float64(c.Prefill) * p.state.uncached[c.Addr]
		}
		tokens := ahead + float64(miss)
		steps := max(1, math.Ceil(tokens/StepTokens))
		admit := AdmitCost.Seconds() + float64(max(c.Prefill, 0)+max(c.Decode, 0))*AdmitSeqCost.Seconds()
		rs[i].Slowdown = PrefillSlowdown(c)
		rs[i].Load = rs[i].Slowdown * (float64(c.Prefill)*admit + ahead*tok)
		rs[i].QueuedFull = rs[i].Load
		at, predicted, ratio, pending, drained := p.state.drain(c.Addr, c.Prefill, in.Now)
		if drained {
			rs[i].Drain = ratio
		}
		if c.Prefill > 0 && pending && drained {
			rs[i].Load = min(rs[i].Load, queueCap(at, predicted, ratio, in.Now))
		}
		need := in.PromptTokens
		if lastOK {
			need -= sharedRunning(c, max(c.Matched, rs[i].Presumed), last, in.Tokens, in.Now)
		}
		rs[i].KVWait = KVWait(c, need, steps)
		saturated = saturated && (ahead >= StepTokens || rs[i].KVWait > 0)
		spare = spare && ahead < StepTokens && rs[i].KVWait <= 0
		rs[i].Estimate = rs[i].Load + rs[i].Slowdown*(admit+float64(miss)*tok+steps*(step+float64(c.Decode)*seq)+running(c.Decode)) + rs[i].KVWait
	}
	p.state.mu.Unlock()
	wait := 0.0               // the fleet's mean queued prefill, seconds
	holders := 0              // candidates missing the least
	decoding := 0.0           // KV tokens the fleet's decoding sequences take a second
	queued := 0.0             // requests in prefill across the fleet
	served := 0.0             // the bookings the fleet can prefill a second
	held := math.Inf(1)       // the fastest holder's own time for the prompt (hitTime)
	heldDecode := math.Inf(1) // the fewest of this picker's sequences decoding on a holder
	for i, c := range in.Candidates {
		admit := AdmitCost.Seconds() + float64(max(c.Prefill, 0)+max(c.Decode, 0))*AdmitSeqCost.Seconds()
		served += 1 / (rs[i].Slowdown * (admit + perBooking*tok))
		wait += rs[i].QueuedFull / float64(len(rs)) // the queue uncapped
		if missOf(in.PromptTokens, c.Matched, rs[i].Presumed) == leastMiss {
			holders++
			held = min(held, hitTime(c, rs[i].Slowdown, leastMiss))
			heldDecode = min(heldDecode, float64(max(c.Decode, 0)))
		}
		queued += float64(max(c.Prefill, 0))
		d := float64(max(c.Decode, 0))
		decoding += d / (rs[i].Slowdown * (step + d*seq))
	}
	if between >= 0 {
		between += decoding * gap
	}
	saving := wait * (1/float64(holders) - 1/float64(holders+1))
	if queued > 0 {
		saving = min(saving, wait*float64(len(rs))/queued)
	}
	busy := rate / served // the fleet's prefill utilization
	// A prompt held past its family's shortest prompt is a session's later turn: moving
	// it recomputes the session's history, which no other request of the family shares.
	later := lastOK && last.shortest > 0 && in.PromptTokens-leastMiss > last.shortest
	best := math.Inf(1) // the lowest estimate
	copied := false     // a candidate's score credits a copy (its Reason says which rule)
	for i, c := range in.Candidates {
		miss := missOf(in.PromptTokens, c.Matched, rs[i].Presumed)
		extra := float64(miss - leastMiss)
		recompute := extra * tok * rs[i].Slowdown
		copyable := extra > 0 && max(c.Matched, rs[i].Presumed) <= 0 && c.Prefill <= 0 && spare && measured && busy < 1 && evicted < 1 && !later
		switch {
		case saturated:
			rs[i].Score = -(extra*saturatedMiss + rs[i].Estimate)
		case lineage:
			rs[i].Score = -rs[i].Estimate
		case copyable && referencedCopy(c, between, gap, len(in.Candidates), holders, extra, heldDecode) && p.state.fitsBesideRouted(c, extra):
			rs[i].Score = -(rs[i].Estimate - recompute)
			rs[i].Reason, copied = ReasonReferencedCopy, true
		case copyable &&
			// a copy on c also saves each later request the fastest holder's time less its own
			replicaPays(c, between, len(in.Candidates), saving+max(0, held-hitTime(c, rs[i].Slowdown, leastMiss)), copyCost(recompute, rate/float64(len(rs)), busy, evicted)):
			rs[i].Score = -(rs[i].Estimate - recompute)
			rs[i].Reason, copied = ReasonReplica, true
		case presumed:
			rs[i].Score = -rs[i].Estimate
		default:
			rs[i].Score = -(rs[i].Estimate + recompute*float64(max(c.Prefill, 0)))
		}
		if in.PromptTokens > 0 {
			rs[i].Benefit = float64(min(max(c.Matched, 0), in.PromptTokens)) / float64(in.PromptTokens)
		}
		best = min(best, rs[i].Estimate)
	}
	sortByScore(in, rs)
	if len(rs) > 1 && rs[1].Score >= rs[0].Score-scoreEpsilon {
		p.state.leastBookedFirst(rs)
	}
	switch {
	case rs[0].Score > -rs[0].Estimate+scoreEpsilon: // the winner's copy rule: its reason
		label(rs, rs[0].Reason)
	case rs[0].Estimate > best+scoreEpsilon && saturated:
		label(rs, ReasonFleetSaturated)
	case rs[0].Estimate > best+scoreEpsilon:
		label(rs, ReasonHolderSticky)
	case copied: // a copy that lost: the decision's reason is the lowest estimate's
		label(rs, ReasonLowestTTFT)
	}
	return rs
}

// running is what an engine with decode sequences decoding adds to a prompt's time to
// first token beyond the steps it is in, in seconds at the model's speed (TTFTAware's
// running(s)): the rest of the step in progress, half of one on average, and the step's
// other tokens streamed before its first (OutputCost each). 0 when nothing decodes.
func running(decode int) float64 {
	if decode <= 0 {
		return 0
	}
	d := float64(decode)
	return (StepCost.Seconds()+d*SeqStepCost.Seconds())/2 + d*OutputCost.Seconds()
}

// leastBookedFirst moves to the front of rs, sorted best first, the entry among those whose
// score ties the best's with the fewest uncached prompt tokens booked on it
// (State.allocated), the smallest address among equals; the others keep their order. It
// looks at every entry, not only the sorted prefix, so a tie among many idle engines is
// decided by the bookings too.
func (s *State) leastBookedFirst(rs []Ranked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	top := rs[0].Score - scoreEpsilon
	pick, least := 0, s.allocated[rs[0].Addr]
	for i := 1; i < len(rs); i++ {
		if rs[i].Score < top {
			continue
		}
		if a := s.allocated[rs[i].Addr]; a < least || a == least && rs[i].Addr < rs[pick].Addr {
			pick, least = i, a
		}
	}
	if pick > 0 {
		r := rs[pick]
		copy(rs[1:pick+1], rs[:pick])
		rs[0] = r
	}
}

// replicaPays says whether a copy of the prompt's prefix on c saves its family more wait
// than it costs. The family's later requests, while the copy stays cached there, may each
// go to the less queued of two holders; with waits spread exponentially about the fleet's
// mean queued prefill wait, the less of two is half the mean, so each saves wait/2; and
// where c is faster than the fastest holder each saves the difference of their own times
// too (hitTime). saving is the sum, per later request. The
// copy stays until c's free KV has been allocated again (presumedHeld's LRU argument):
// c takes about 1/engines of the fleet's uncached bookings, between of which come between
// two of the family's requests, so about engines x free / between of them arrive first.
// The copy costs cost seconds (Rank's copy(s): the recompute, the delay of the requests
// queued behind it, and the recompute of the blocks it evicts). A family seen once
// (between < 0) has no measured arrivals and is never copied.
func replicaPays(c Candidate, between float64, engines int, saving, cost float64) bool {
	if between < 0 || saving <= 0 {
		return false
	}
	return float64(engines)*freeKV(c.Engine)*saving > cost*max(between, 1)
}

// referencedCopy says whether a copy of the prompt's prefix on c, extra tokens to
// recompute, is one its family keeps referenced and that takes load off a holder busier
// than c by the family's share (decision 1732). By Little's law the family keeps
// family = pace/gap of its sequences decoding at once (gap: the mean time between two of
// its requests, spacing; pace: c's measured decode duration), family/(holders+1) on each
// of holders+1 holders; at one or more a holder always runs one, so the prefix's blocks
// stay referenced and vLLM never puts them on its free LRU: the copy is paid once and kept
// as long as the family keeps its rate, not one LRU cycle (replicaPays' life). A sequence
// is the least that moves: a further holder takes family/holders - family/(holders+1) =
// family/(holders x (holders+1)) of the family's sequences off each holder, and nothing is
// copied below one (a second holder at 2 running, a third at 6, a fourth at 12). It must
// fit c beside what c keeps referenced: the recompute within c's free pool, with the tokens c is
// booked between two of the family's visits to it ((holders+1) x between / engines) left
// over. And it moves work from where it is in excess: the least busy holder
// (heldDecode, its sequences decoding) runs at least the family's share per holder
// (family/holders) more than c, so after the copy c runs no more than that holder did.
// A family seen once (between < 0) or an engine whose pace is not measured copies nothing.
func referencedCopy(c Candidate, between, gap float64, engines, holders int, extra, heldDecode float64) bool {
	if between < 0 || gap <= 0 || c.DecodePace <= 0 || holders <= 0 {
		return false
	}
	family := c.DecodePace.Seconds() / gap // the family's sequences decoding at once
	if family < float64(holders*(holders+1)) {
		return false
	}
	free := freeKV(c.Engine)
	return extra <= free && float64(holders+1)*between/float64(engines) < free-extra &&
		heldDecode-float64(max(c.Decode, 0)) >= family/float64(holders)
}

// fitsBesideRouted says whether extra tokens fit c's GPU KV pool beside the distinct prompt
// tokens this picker routed to c, as its chunk LRU counts them (chunkLRU; every chunk once,
// at its last routing). The LRU is kept only on a fleet that publishes no KV events, which
// has no CPU tier: a prefix a copy evicts there is computed again from nothing when its family
// returns, so a referenced copy (referencedCopy) is made only into room (decision 1732).
// Where no LRU is kept for c, the index sees the holdings and an evicted prefix reloads from
// the CPU tier; it says true.
func (s *State) fitsBesideRouted(c Candidate, extra float64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lru[c.Addr]
	if l == nil || s.indexed {
		return true
	}
	return float64(l.prefix(lruSpan))+extra <= kvPool(c.Engine)
}

// copyCost is what a copy whose recompute takes x seconds costs the fleet, in seconds of
// wait (TTFTAware's copy(s)): its own prefill and the arrivals (arrivals a second) that
// queue during it, over 1 - busy, and the evicted blocks' recompute, repeated as often as
// the fleet's uncached tokens are recomputes of evicted prompts (evicted). busy and
// evicted are below 1.
func copyCost(x, arrivals, busy, evicted float64) float64 {
	return x*(1+arrivals*x/2)/(1-busy) + x/(1-evicted)
}

// spacing is the mean of the uncached tokens booked on the fleet between two requests of
// a prefix key and the mean time between them, from its entry r in State.recent (ok false:
// none); -1 when it was not seen twice.
func spacing(r routed, ok bool) (between, gap float64) {
	if !ok {
		return -1, 0
	}
	return r.between, r.gap
}

// missOf is the prompt tokens a candidate would prefill: those neither matched in the
// cache index nor presumed held.
func missOf(prompt, matched, presumed int) int {
	return max(prompt-max(min(matched, prompt), presumed, 0), 0)
}

// presumption returns, when the cache index shows no candidate holding any of the prompt,
// the last two endpoints its prefix key was routed to (none when there are none, or the
// index knows the prompt), each marked a repeat when the prompt's token ids show it does
// not continue the one routed there (see pastRoute). r is the key's entry in s.recent (ok
// false: none); s.mu must be held.
func (s *State) presumption(in Input, r routed, ok bool) [2]pastRoute {
	if in.PrefixKey == 0 || in.PromptTokens <= 0 || !ok {
		return [2]pastRoute{}
	}
	for _, c := range in.Candidates {
		if c.Matched > 0 {
			return [2]pastRoute{}
		}
	}
	var out [2]pastRoute
	known := len(in.Tokens) == in.PromptTokens
	for i, rt := range [2]route{r.route, r.prev} {
		out[i] = pastRoute{addr: rt.addr, tokens: rt.tokens, since: s.allocated[rt.addr] - rt.mark}
		starts := known && rt.tail != 0 && tailHash(in.Tokens, rt.tokens) == rt.tail
		out[i].repeat = known && rt.tail != 0 && !(starts && rt.tokens < in.PromptTokens)
		out[i].starts = starts
	}
	return out
}

// pastRoute is a prompt of tokens tokens routed to addr, since which uncached tokens were
// booked there. repeat says the prompt asked about is known not to continue it: its
// tokens where the routed prompt's last ones were (tailHash) differ, or it is no longer.
// The two are then requests of one family that share a prefix (a hot document, a system
// prompt), where a second holder serves the family's later requests as well as the
// first; one that continues it is the next turn of a session, whose later turns continue
// only this one and gain nothing from the copy a move would leave behind.
//
// starts says the prompt asked about is known to start with the routed one (their tokens
// at the routed prompt's end agree): the route holds all of it that the routed prompt
// had, its last partial chunk too, which the chunks (presumeChunks) do not show.
type pastRoute struct {
	addr   string
	tokens int
	since  float64
	repeat bool
	starts bool
}

// presumedHeld says whether c still holds a prompt routed to it before since uncached
// prompt tokens were booked on it: vLLM frees a finished request's blocks to the tail of
// an LRU queue and allocates from its head, so they are evicted once the free blocks ahead
// of them, the pool less what the running sequences use, have been allocated again. The
// pool and its use are the scraped ones; the use is 0 when c is not scraped. A negative
// since (the endpoint was forgotten and came back: its count restarted) holds nothing.
func presumedHeld(c Candidate, since float64) bool {
	if since < 0 {
		return false
	}
	return since < freeKV(c.Engine)
}

// freeKV is the tokens of e's GPU KV pool (kvPool) its running sequences leave free, by the
// scraped use; all of it when e is not scraped.
func freeKV(e EngineMetrics) float64 {
	pool := kvPool(e)
	if !e.Known {
		return pool
	}
	return pool - min(max(e.KVUsage, 0), 1)*pool
}

// kvPool is e's GPU KV pool in tokens: the scraped one, or KVPoolTokens when the engine
// does not export it.
func kvPool(e EngineMetrics) float64 {
	if e.KVPoolTokens > 0 {
		return float64(e.KVPoolTokens)
	}
	return KVPoolTokens
}

// saturatedMiss weighs a token of miss beyond the least when the fleet is saturated: more
// than any estimate can differ (a day of prefill per token), so the least miss wins.
const saturatedMiss = 86400.0

// hitTime is c's own time to first token for a prompt it holds but for miss tokens: one
// admission, the miss's prefill and its steps at c's batch and slowdown, without the
// prefill queued ahead or the KV wait (est(s)'s own work, for a holder). The fastest
// holder's hitTime less a copy's is what each of the family's later requests saves by
// the copy's speed (TTFTAware, copy(s)).
func hitTime(c Candidate, slowdown float64, miss int) float64 {
	admit := AdmitCost.Seconds() + float64(max(c.Prefill, 0)+max(c.Decode, 0))*AdmitSeqCost.Seconds()
	steps := max(1, math.Ceil(float64(miss)/StepTokens))
	return slowdown * (admit + float64(miss)*TokenCost.Seconds() + steps*(StepCost.Seconds()+float64(max(c.Decode, 0))*SeqStepCost.Seconds()))
}
