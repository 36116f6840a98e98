package picker

import (
	"strconv"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/scoring"
)

// RankedView is a CacheView whose engines run data-parallel ranks behind each endpoint
// and which tells them apart (KVEventsView with Ranks > 1): its CacheMatch.PinRank names
// the rank holding the matched prefix. A picker over one chooses a rank as well as an
// endpoint (Decision.PinRank).
type RankedView interface {
	CacheView
	// DPRanks is the data-parallel size behind each endpoint; 1 or less: none.
	DPRanks() int
}

// DPRanks implements RankedView.
func (v KVEventsView) DPRanks() int { return v.Ranks }

// DPRanks implements RankedView: the largest of its views'.
func (l Longest) DPRanks() int {
	n := 0
	for _, v := range l {
		if rv, ok := v.(RankedView); ok {
			n = max(n, rv.DPRanks())
		}
	}
	return n
}

// dpRanks is the data-parallel size the cache view tells apart, 0 when it tells none.
func dpRanks(c CacheView) int {
	if rv, ok := c.(RankedView); ok && rv.DPRanks() > 1 {
		return min(rv.DPRanks(), fleet.MaxRanks)
	}
	return 0
}

// rankPicker chooses the data-parallel rank behind a booked endpoint. Guarded by the
// picker's decide lock.
type rankPicker struct {
	n      int            // ranks behind each endpoint (more than 1)
	state  *scoring.State // the rank policies' history, apart from the endpoints'
	names  map[string][]string
	loads  []fleet.Load
	cands  []scoring.Candidate
	ranked []scoring.Ranked
}

// rankNames are the names the rank policies know endpoint addr's ranks by: "addr#r".
func (rp *rankPicker) rankNames(addr string) []string {
	if ns, ok := rp.names[addr]; ok {
		return ns
	}
	ns := make([]string, rp.n)
	for r := range ns {
		ns[r] = addr + "#" + strconv.Itoa(r)
	}
	rp.names[addr] = ns
	return ns
}

// forget drops the names of the endpoints not in keep.
func (rp *rankPicker) forget(keep map[string]bool) {
	for a := range rp.names {
		if !keep[a] {
			delete(rp.names, a)
		}
	}
}

// choose ranks the ranks behind b's endpoint as the policy ranks endpoints, each rank a
// candidate with the load of the bookings pinned to it and, for the rank holding the
// endpoint's credited prefix (m.PinRank), that prefix; it pins b to the first and
// returns 1 + its rank. pol is the policy in force built over rp.state, in the
// decision's input (its candidates, scratch and population are replaced). A rank's
// other prefixes (shorter than its endpoint's best), its in-flight sizes, decode pace
// and engine metrics are not known to it.
func (rp *rankPicker) choose(pol scoring.Policy, in scoring.Input, b *fleet.Booking, m CacheMatch) int {
	names := rp.rankNames(b.Addr())
	rp.loads = b.Ranks(rp.n, rp.loads[:0])
	cs := rp.cands[:0]
	for r, l := range rp.loads {
		c := scoring.Candidate{Addr: names[r], HolderRank: -1, InFlight: l.InFlight(), Prefill: l.Prefill, Decode: l.Decode}
		if m.Matched > 0 && m.PinRank == r+1 {
			c.Matched, c.HolderRank = m.Matched, 0
		}
		cs = append(cs, c)
	}
	rp.cands = cs
	in.Candidates, in.Sorted, in.Top, in.Fleet, in.Scratch = cs, false, 1, scoring.Population{}, rp.ranked[:0]
	var ranked []scoring.Ranked
	if t, ok := pol.(scoring.TokenlessRanker); ok && in.PromptTokens == 0 {
		ranked = t.RankTokenless(in) // as the endpoints were ranked
	} else {
		ranked = pol.Rank(in)
	}
	if cap(ranked) > cap(rp.ranked) {
		rp.ranked = ranked[:0]
	}
	r := 0
	for i, n := range names {
		if len(ranked) > 0 && n == ranked[0].Addr {
			r = i
		}
	}
	if b.Pin(r, rp.n) != nil {
		return 0 // pinned with another size before (the view's ranks changed): not pinned
	}
	rp.state.Booked(names[r], in.Now)
	rp.state.Routed(in.PrefixKey, names[r], in.Now)
	return r + 1
}
