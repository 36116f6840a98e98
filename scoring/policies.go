package scoring

import "slices"

// LeastLoad sends each request to the endpoint with the fewest requests in flight; ties
// go to the smallest address.
type LeastLoad struct{}

// Name implements Policy.
func (LeastLoad) Name() string { return "leastload" }

// Needs implements Policy.
func (LeastLoad) Needs() Needs { return 0 }

// Rank implements Policy: score = -in-flight.
func (LeastLoad) Rank(in Input) []Ranked { return leastLoad(in, ReasonLeastLoad) }

func leastLoad(in Input, reason string) []Ranked {
	rs := base(in, reason)
	for i := range rs {
		rs[i].Score = -float64(rs[i].InFlight)
	}
	sortByScore(in, rs)
	return rs
}

// LoadOnly ranks by load alone with the reason ReasonLoadOnly: what the picker does when a
// request has no token ids to look up.
func LoadOnly(in Input) []Ranked { return leastLoad(in, ReasonLoadOnly) }

// RoundRobin takes the next endpoint in address order, one step per request.
type RoundRobin struct{ state *State }

// Name implements Policy.
func (*RoundRobin) Name() string { return "roundrobin" }

// Needs implements Policy.
func (*RoundRobin) Needs() Needs { return 0 }

// Rank implements Policy. The ranking is the address order rotated to the current
// position, so fallbacks are the endpoints that would come next.
func (p *RoundRobin) Rank(in Input) []Ranked {
	rs := base(in, ReasonRoundRobin)
	if len(rs) == 0 {
		return rs
	}
	sortByAddr(rs)
	start := int(p.state.nextRR() % uint64(len(rs)))
	out := make([]Ranked, 0, len(rs))
	out = append(out, rs[start:]...)
	out = append(out, rs[:start]...)
	for i := range out {
		out[i].Score = float64(len(out) - i)
	}
	return out
}

// Session pins a session key to an endpoint with a consistent hash ring; requests without
// a key take the QPS fallback.
type Session struct{ state *State }

// Name implements Policy.
func (*Session) Name() string { return "session" }

// Needs implements Policy.
func (*Session) Needs() Needs { return 0 }

// Rank implements Policy.
func (p *Session) Rank(in Input) []Ranked { return p.state.fallback(in) }

// KVAware is the Production Stack's cache-aware router: the first holder of the prompt's
// first chunk (HolderRank 0) wins unless its match is shorter than
// PromptTokens - Threshold; otherwise, or with no holder, the session route or the QPS
// fallback. Other endpoints follow in fallback order.
type KVAware struct {
	Threshold int
	state     *State
}

// Name implements Policy.
func (*KVAware) Name() string { return "kvaware" }

// Needs implements Policy.
func (*KVAware) Needs() Needs { return NeedsCache }

// Rank implements Policy.
func (p *KVAware) Rank(in Input) []Ranked {
	holder := -1
	for i, c := range in.Candidates {
		if c.HolderRank == 0 {
			holder = i
			break
		}
	}
	rs := p.state.fallback(in)
	if holder < 0 || in.Candidates[holder].Matched < max(in.PromptTokens-p.Threshold, 0) {
		return rs
	}
	addr := in.Candidates[holder].Addr
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
		out[i].Reason = ReasonCacheHolder
		out[i].Score = float64(len(out) - i)
	}
	return out
}

// LoadAware is the seed's policy:
//
//	benefit(s)       = min(matched(s), prompt_tokens) / max(prompt_tokens, 1)
//	relative_load(s) = (inflight(s) - mean) / max(1, mean)
//	score(s)         = benefit(s) - Beta * relative_load(s)
//
// Highest score wins, ties to the smallest address. When no candidate holds any of the
// prompt it takes the session route or the QPS fallback, as upstream does.
type LoadAware struct {
	Beta  float64
	state *State
}

// Name implements Policy.
func (*LoadAware) Name() string { return "loadaware" }

// Needs implements Policy.
func (*LoadAware) Needs() Needs { return NeedsCache | NeedsBeta }

// RankTokenless implements TokenlessRanker: with no token ids to look up, the load term
// alone (LoadOnly), not the session route or QPS fallback Rank takes when nothing matches.
func (*LoadAware) RankTokenless(in Input) []Ranked { return LoadOnly(in) }

// Rank implements Policy.
func (p *LoadAware) Rank(in Input) []Ranked {
	anyMatch := false
	for _, c := range in.Candidates {
		if c.Matched > 0 {
			anyMatch = true
			break
		}
	}
	if !anyMatch {
		return p.state.fallback(in)
	}
	m := in.meanLoad()
	best, prompt := 0.0, float64(max(in.PromptTokens, 1))
	if k := in.prefix(); in.Top > 0 && len(in.Candidates) > 2*k {
		// The caller reads the first Top: score every candidate, keep the k best as
		// sortTop would, and write out those k only (see Input.Top).
		top := newCandidateTop(in, k)
		for i, c := range in.Candidates {
			benefit := float64(min(c.Matched, in.PromptTokens)) / prompt
			top.offer(i, benefit-p.Beta*relativeLoad(c.InFlight, m))
			best = max(best, benefit)
		}
		var buf [sortedPrefix]int32
		places := top.places(&buf)
		rs := in.Scratch[:0]
		if cap(rs) < len(places) {
			rs = make([]Ranked, 0, len(places))
		}
		for _, i := range places {
			c := in.Candidates[i]
			r := Ranked{Addr: c.Addr, RelativeLoad: relativeLoad(c.InFlight, m), Matched: c.Matched,
				InFlight: c.InFlight, Reason: ReasonCacheAffinity}
			r.Benefit = float64(min(r.Matched, in.PromptTokens)) / prompt
			r.Score = r.Benefit - p.Beta*r.RelativeLoad
			rs = append(rs, r)
		}
		slices.SortFunc(rs, func(a, b Ranked) int { return byScore(&a, &b) }) // sortTop's order of its k
		if rs[0].Benefit < best {
			label(rs, ReasonLoadBalance)
		}
		return rs
	}
	// base's entries and their scores in one pass: over a large fleet the ranking is
	// bound by memory, and a second pass over it costs as much as the first.
	rs := scratchFor(in)
	for i, c := range in.Candidates {
		r := Ranked{Addr: c.Addr, RelativeLoad: relativeLoad(c.InFlight, m), Matched: c.Matched,
			InFlight: c.InFlight, Reason: ReasonCacheAffinity}
		r.Benefit = float64(min(r.Matched, in.PromptTokens)) / prompt
		r.Score = r.Benefit - p.Beta*r.RelativeLoad
		best = max(best, r.Benefit)
		rs[i] = r
	}
	sortByScore(in, rs)
	if rs[0].Benefit < best {
		label(rs, ReasonLoadBalance)
	}
	return rs
}

// Leaders and RanksLeaders let a caller rank only a fleet's leaders. Given in (every
// endpoint of a fleet as Candidates, but for their loads and matches) where some endpoint
// holds part of the prompt, and fleet, that fleet's Population: when RanksLeaders(fleet),
// ranking only the endpoints that hold part of the prompt and the Leaders(in) least
// loaded of the others (fewest in flight, then the smallest address), with Input.Fleet
// set to fleet, puts the same endpoints first, in the same order, as ranking every
// endpoint would, for as many as in.Top promises. An endpoint holding nothing scores by
// its load alone, lower for more load, so it can lead only if fewer than Leaders(in)
// others holding nothing come before it.
func (p *LoadAware) Leaders(in Input) int { return in.prefix() }

// RanksLeaders is false when beta is so small beside fleet's mean load (beta 0 included)
// that one request more no longer outweighs a tie (scoreEpsilon): the endpoints holding
// nothing then tie, and among them the addresses decide. See Leaders.
func (p *LoadAware) RanksLeaders(fleet Population) bool {
	if fleet.Endpoints <= 0 {
		return false
	}
	m := float64(fleet.InFlight) / float64(fleet.Endpoints)
	return p.Beta/max(1, m) > 2*scoreEpsilon
}
