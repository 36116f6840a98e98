package picker

import (
	"context"
	"slices"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/scoring"
)

// The decision's large-fleet path: the cache answers for the holders only, the
// candidates are places in the fleet's view, and the ranking's memory is reused, so a
// decision allocates nothing per endpoint.

// HeldMatcher is a CacheView that can also report only the endpoints holding part of the
// prompt, so a decision over a large fleet costs the holders, not the fleet. The picker
// prefers it when the view offers it.
type HeldMatcher interface {
	CacheView
	// MatchHeld appends to dst the match of every candidate holding part of the prompt,
	// by place among the candidates; the others hold nothing (HolderRank -1). It answers
	// as Match over the candidates' own list would.
	MatchHeld(ctx context.Context, tokens []uint32, c Candidates, dst []Held) ([]Held, error)
}

// Candidates is a decision's candidate list as a HeldMatcher sees it: the fleet's
// endpoint list (the same slice while the endpoint set does not change; never modified)
// and, when the decision may use only some of them (a subset hint, an endpoint ejected),
// their places in it, ascending. Subset nil means all of All but the places in Except
// (ascending; the picker names a few unusable endpoints so rather than list the rest).
type Candidates struct {
	All    []string
	Subset []int32
	Except []int32 // with Subset nil: the places of All left out, ascending (nil: none)
}

// Held is the CacheMatch of the endpoint at Endpoint.
type Held struct {
	Endpoint int
	CacheMatch
}

// pickScratch is one decision's memory before the lock, reused across decisions.
type pickScratch struct {
	held   []Held
	idx    []int32 // candidate -> place in the fleet view, when candidates are a subset (else nil)
	idxBuf []int32 // idx's memory
}

// rankScratch is the ranking's memory, reused by every decision under Picker.decide.
type rankScratch struct {
	cands  []scoring.Candidate
	ranked []scoring.Ranked
	heldAt []int32          // place in cands -> 1 + index in held; zero between decisions
	srcs   []string         // sources' memory: the source of each kept entry; empty between decisions
	least  fleet.LeastQuery // leaders' question to the fleet, its memory reused
}

// fill makes rs.cands the candidates' loads, with no cache credit: read through the view
// by place when placed and the endpoint set has not changed since view (idx: the
// candidates' places, nil when they are the whole view), else looked up in the set.
func (rs *rankScratch) fill(set *fleet.Set, view *fleet.View, cands []string, idx []int32, placed bool) {
	if placed && set.View() == view {
		rs.cands = slices.Grow(rs.cands[:0], len(cands))[:len(cands)]
		for i, a := range cands {
			at := i
			if idx != nil {
				at = int(idx[i])
			}
			rs.cands[i] = candidate(view.Load(at))
			rs.cands[i].Addr = a
		}
		return
	}
	loads := set.Loads(cands)
	rs.cands = rs.cands[:0]
	for _, l := range loads {
		rs.cands = append(rs.cands, candidate(l))
	}
}

// leaders makes in's candidates those that can lead lp's ranking of the whole
// view, or of the view less uv's unusable endpoints when uv is not nil (the holders in
// held, by place in the view or in uv.cands, and the least loaded others: see
// scoring.LeaderRanker), and sets in.Fleet to that population; it reports false, leaving
// in as it was, when the view is no longer current or the policy cannot rank on its
// leaders alone. It reads the loads of the leaders only, from the fleet's load order, all
// as of one instant. The candidates carry what loadaware reads: address, in-flight count
// and match (no prefill, decode or pace).
func (rs *rankScratch) leaders(lp scoring.LeaderRanker, view *fleet.View, held []Held, uv *usableView, in *scoring.Input) bool {
	addrs := view.Addrs()
	place := func(e int) int { // a held entry's place in the view
		if uv == nil {
			return e
		}
		return int(uv.idx[e])
	}
	var out []int32 // the view's places that are not candidates
	if uv != nil {
		out = uv.out
	}
	q := &rs.least
	words := (len(addrs) + 63) / 64
	q.Skip = slices.Grow(q.Skip[:0], words)[:words] // zero between decisions
	q.Of = q.Of[:0]
	for _, h := range held {
		i := place(h.Endpoint)
		q.Skip[i/64] |= 1 << (i % 64)
		q.Of = append(q.Of, int32(i))
	}
	for _, i := range out {
		q.Skip[i/64] |= 1 << (i % 64)
		q.Of = append(q.Of, i)
	}
	q.N = lp.Leaders(*in)
	ok := view.Least(q)
	for _, i := range q.Of {
		q.Skip[i/64] = 0
	}
	pop := scoring.Population{Endpoints: len(addrs) - len(out), InFlight: q.Sum}
	if ok {
		for k := range out {
			pop.InFlight -= q.Loads[len(held)+k]
		}
	}
	if !ok || !lp.RanksLeaders(pop) {
		return false
	}
	rs.cands = rs.cands[:0]
	for j, h := range held {
		rs.cands = append(rs.cands, scoring.Candidate{Addr: addrs[place(h.Endpoint)], InFlight: q.Loads[j],
			Matched: h.Matched, HolderRank: h.HolderRank})
	}
	loads := q.Loads[len(held)+len(out):]
	for k, i := range q.Places {
		rs.cands = append(rs.cands, scoring.Candidate{Addr: addrs[i], InFlight: loads[k], HolderRank: -1})
	}
	// Holders come in the cache's order, not the view's.
	in.Candidates, in.Fleet, in.Sorted = rs.cands, pop, false
	return true
}

// usableView is a fleet view less the endpoints unusable at one moment. Its slices are
// shared by the decisions that use it and never modified.
type usableView struct {
	view  *fleet.View
	bad   []string // the unusable endpoints, sorted, as the health view listed them
	cands []string // the view's addresses less bad's, in the view's order
	idx   []int32  // cands[i] is view.Addrs()[idx[i]]
	out   []int32  // the places of the view's addresses in bad, ascending
}

// usableIn returns view less bad (sorted), and false when that leaves no endpoint. It
// returns nil when bad leaves the view whole, and when it leaves nothing: the candidates
// are then the view's. The last answer is kept, so decisions under one view and one set
// of unusable endpoints cost bad, not the fleet.
func (p *Picker) usableIn(view *fleet.View, bad []string) (*usableView, bool) {
	if len(bad) == 0 {
		return nil, true
	}
	if uv := p.usable.Load(); uv != nil && uv.view == view && slices.Equal(uv.bad, bad) {
		return uv, true
	}
	addrs := view.Addrs()
	var out []int32
	for _, b := range bad {
		if i, ok := slices.BinarySearch(addrs, b); ok {
			out = append(out, int32(i))
		}
	}
	switch len(out) {
	case 0:
		return nil, true
	case len(addrs):
		return nil, false
	}
	uv := &usableView{view: view, bad: slices.Clone(bad), out: out,
		cands: make([]string, 0, len(addrs)-len(out)), idx: make([]int32, 0, len(addrs)-len(out))}
	k := 0
	for i, a := range addrs {
		if k < len(out) && int(out[k]) == i {
			k++
			continue
		}
		uv.cands = append(uv.cands, a)
		uv.idx = append(uv.idx, int32(i))
	}
	p.usable.Store(uv)
	return uv, true
}

// anyMatched reports whether some holder holds a prefix of the prompt (loadaware's
// ranking is otherwise its fallback's, over every candidate).
func anyMatched(held []Held) bool {
	for _, h := range held {
		if h.Matched > 0 {
			return true
		}
	}
	return false
}

// sources names the cache source of each ranked endpoint's match (nil when none has
// one), in dst when dst is not nil (it is cleared first). It looks up the ranked entries
// only, so its cost does not grow with the holders.
func (rs *rankScratch) sources(dst map[string]string, ranked []scoring.Ranked, cands []string, matches []CacheMatch, held []Held, useHeld bool) map[string]string {
	if matches == nil && !useHeld {
		return nil
	}
	if useHeld {
		rs.heldAt = slices.Grow(rs.heldAt[:0], len(cands))[:len(cands)]
		for i, h := range held {
			rs.heldAt[h.Endpoint] = int32(i + 1)
		}
		defer func() {
			for _, h := range held {
				rs.heldAt[h.Endpoint] = 0
			}
		}()
	}
	srcs := slices.Grow(rs.srcs[:0], len(ranked))[:len(ranked)]
	rs.srcs = srcs
	defer clear(srcs) // hold no strings between decisions
	n := 0
	for k, r := range ranked {
		if r.Matched <= 0 {
			continue
		}
		i := placeOf(cands, r.Addr)
		switch {
		case i < 0:
		case !useHeld:
			srcs[k] = matches[i].Source
		case rs.heldAt[i] > 0:
			srcs[k] = held[rs.heldAt[i]-1].Source
		}
		if srcs[k] != "" {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := dst
	if out == nil {
		out = make(map[string]string, n)
	} else {
		clear(out)
	}
	for k, src := range srcs {
		if src != "" {
			out[ranked[k].Addr] = src
		}
	}
	return out
}

// placeOf returns the place of addr in cands (sorted, as the fleet gives them; searched
// in full if not), or -1.
func placeOf(cands []string, addr string) int {
	if i, ok := slices.BinarySearch(cands, addr); ok {
		return i
	}
	return slices.Index(cands, addr)
}

// inView reports whether cands are, in order, addresses of view, and leaves in sc.idx
// their places in it (nil when cands is the view's own list).
func (p *Picker) inView(view *fleet.View, cands []string, sc *pickScratch) bool {
	all := view.Addrs()
	sc.idx = nil
	if len(cands) == len(all) && (len(all) == 0 || &cands[0] == &all[0]) {
		return true
	}
	idx := sc.idxBuf[:0]
	j := 0
	for _, a := range cands {
		for j < len(all) && all[j] != a {
			j++
		}
		if j == len(all) {
			return false
		}
		idx = append(idx, int32(j))
		j++
	}
	sc.idx, sc.idxBuf = idx, idx
	return true
}

// applyMatches copies the cache's matches onto the candidates (Candidates hold no credit
// when they come in): by place from a dense answer aligned with cands, or from held
// entries.
func applyMatches(cs []scoring.Candidate, cands []string, matches []CacheMatch, held []Held, useHeld bool) {
	if useHeld {
		// held names places in cands; cs may lack endpoints removed since (Loads).
		if len(cs) == len(cands) {
			for _, h := range held {
				cs[h.Endpoint].Matched, cs[h.Endpoint].HolderRank = h.Matched, h.HolderRank
			}
			return
		}
		matches = make([]CacheMatch, len(cands))
		for i := range matches {
			matches[i].HolderRank = -1
		}
		for _, h := range held {
			matches[h.Endpoint] = h.CacheMatch
		}
	}
	if matches == nil {
		return
	}
	j := 0 // cs is cands in order, less endpoints removed since
	for i := range cs {
		for cands[j] != cs[i].Addr {
			j++
		}
		cs[i].Matched, cs[i].HolderRank = matches[j].Matched, matches[j].HolderRank
	}
}
