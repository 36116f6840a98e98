package picker

import (
	"github.com/loadaware/loadaware-epp/fleet"
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

// RankSlack is how much more loaded than the least loaded rank, in RankLoad units, the
// rank holding a request's prefix may be and still take it (docs/decisions/0830: on
// the dp profile 4 keeps the TTFT p95 of vLLM's own balancing and raises the hit rate
// by 2.6-4.9 points; 0 is vLLM's balancer on the picker's bookings, 8 trades p95 for hits).
const RankSlack = 4

// RankLoad is a rank's load as vLLM's data-parallel balancer weighs it, waiting*4 +
// running (DPLBAsyncMPClient, vllm/v1/engine/core_client.py), over the picker's
// bookings pinned to it: a request without a first token yet counts 4, one decoding 1.
func RankLoad(l fleet.Load) int { return 4*l.Prefill + l.Decode }

// RankEngineView is an EngineView that also reports each data-parallel rank's load as
// the engine exported it (vLLM labels num_requests_running and _waiting by `engine`, the
// rank; enginemetrics.Scraper). RankLoads appends to dst each rank's counts at the last
// scrape, rank r at dst[len(dst)+r], as a fleet.Load whose Prefill is the rank's waiting
// requests and Decode its running ones (so RankLoad is vLLM's score), and returns the
// scrape's stamp (its time, in nanoseconds); ok false when addr has no per-rank scrape.
// It must be fast, safe for concurrent use, and allocate nothing when dst has room.
type RankEngineView interface {
	EngineView
	RankLoads(addr string, dst []fleet.Load) (loads []fleet.Load, stamp int64, ok bool)
}

// rankPicker chooses the data-parallel rank behind a booked endpoint. Guarded by the
// picker's decide lock.
type rankPicker struct {
	n       int            // ranks behind each endpoint (more than 1)
	scraped RankEngineView // nil: the bookings alone
	loads   []fleet.Load   // scratch
	seen    []fleet.Load   // scratch: the scraped counts
	at      []fleet.Load   // scratch: the bookings' loads at that scrape
	score   []int          // scratch: each rank's RankLoad as weighed
}

// choose pins b to the rank holding the endpoint's credited prefix m (m.PinRank) when
// its RankLoad is at most RankSlack over the least loaded rank's, else to the least
// loaded rank (the first on a tie, as vLLM's balancer), and returns 1 + the rank; 0
// when b could not be pinned (the endpoint was pinned with another size before).
//
// The endpoint was chosen by the policy on its whole load and its best rank's prefix;
// the ranks are weighed by vLLM's own rule, which the policies' relative-load terms
// did not match at this grain (decision 0830: TTFT p95 +65-70 % on the dp profile).
//
// A rank's load is its pinned bookings' RankLoad plus, when the engines' per-rank counts
// are scraped (RankEngineView), the others' share: the requests the scrape counted less
// this picker's bookings on the rank when it first saw that scrape (at least 0), each
// weighed as the scrape's requests weigh on average in RankLoad. So the endpoint's load
// is this picker's bookings plus the other replicas'. The scrape shows what other picker
// replicas sent to the rank, which the bookings cannot (decision 0831).
func (rp *rankPicker) choose(b *fleet.Booking, m CacheMatch) int {
	rp.loads = b.Ranks(rp.n, rp.loads[:0])
	rp.score = rp.score[:0]
	for _, l := range rp.loads {
		rp.score = append(rp.score, RankLoad(l))
	}
	if rp.scraped != nil {
		var stamp int64
		var ok bool
		rp.seen, stamp, ok = rp.scraped.RankLoads(b.Addr(), rp.seen[:0])
		if ok {
			rp.at = b.RanksAt(rp.n, stamp, rp.at[:0])
			for r := range min(len(rp.seen), rp.n) {
				if n := rp.seen[r].InFlight(); n > 0 {
					rp.score[r] += max(n-rp.at[r].InFlight(), 0) * RankLoad(rp.seen[r]) / n
				}
			}
		}
	}
	least := 0
	for r, s := range rp.score {
		if s < rp.score[least] {
			least = r
		}
	}
	r := least
	if h := m.PinRank - 1; m.Matched > 0 && h >= 0 && h < rp.n && rp.score[h] <= rp.score[least]+RankSlack {
		r = h
	}
	if b.Pin(r, rp.n) != nil {
		return 0
	}
	return r + 1
}
