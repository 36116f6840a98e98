package picker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/scoring"
)

// rankTokens is a 64-token prompt; rankIndex an index where endpoint ep's rank holds its
// first n tokens.
var rankTokens = func() []uint32 {
	t := make([]uint32, 64)
	for i := range t {
		t[i] = uint32(i + 1)
	}
	return t
}()

func rankIndex(t *testing.T, ep string, rank, n int) *kvindex.Index {
	t.Helper()
	ix, err := kvindex.NewIndex(kvindex.IndexConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ix.Apply(ep, kvindex.Batch{DPRank: rank, Events: []kvindex.Event{{Kind: kvindex.BlockStored,
		Hashes: []uint64{1, 2, 3, 4}[:n/16], Tokens: rankTokens[:n], BlockSize: 16}}})
	return ix
}

// The holder of the prompt takes it until its RankLoad is past RankSlack over the least
// loaded rank's; then the least loaded rank (the first on a tie) does. The policy
// chooses only the endpoint.
func TestPickChoosesARank(t *testing.T) {
	const ep = "10.0.0.2:8000"
	tests := []struct {
		name   string
		policy string
		ranks  int
		holder int   // the rank holding the prompt; -1: none
		picks  []int // the rank of each successive pick (bookings kept), -1: none pinned
	}{
		{"one rank pins nothing", "loadaware", 1, 0, []int{-1, -1}},
		// Rank 2 at 0, then 4 (= 0 + RankSlack), then 8: the others take one each.
		{"the holder until it is loaded past the slack", "kvaware", 4, 2, []int{2, 2, 0, 1, 3, 2}},
		{"a policy that reads no cache: the least loaded", "leastload", 4, 2, []int{0, 1, 2, 3, 0, 1}},
		{"nothing held: the least loaded ranks", "loadaware", 2, -1, []int{0, 1, 0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := rankIndex(t, ep, max(tc.holder, 0), 64)
			if tc.holder < 0 {
				ix = rankIndex(t, "10.0.0.9:8000", 0, 64)
			}
			p := newPicker(t, Options{Fleet: newFleet(ep), Policy: tc.policy, Cache: KVEventsView{Index: ix, Ranks: tc.ranks}})
			if got := pickRanks(t, p, len(tc.picks)); !slices.Equal(got, tc.picks) {
				t.Errorf("ranks picked %v, want %v", got, tc.picks)
			}
		})
	}
}

// pickRanks makes n decisions for rankTokens on p, holding their bookings until the test
// ends, and returns each one's pinned rank (-1: none).
func pickRanks(t *testing.T, p *Picker, n int) []int {
	t.Helper()
	var got []int
	for range n {
		d, err := p.Pick(context.Background(), Request{Tokens: rankTokens})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Booking.Release() })
		r, ok := d.Rank()
		if !ok {
			r = -1
		}
		got = append(got, r)
	}
	return got
}

// rankScrape is a RankEngineView serving fixed per-rank loads, each that many running
// requests; fresh stamps each call as a new scrape.
type rankScrape struct {
	loads []int // nil: not known
	fresh bool
	stamp int64
}

func (rankScrape) Engine(string, time.Time) scoring.EngineMetrics { return scoring.EngineMetrics{} }

func (v *rankScrape) RankLoads(addr string, dst []fleet.Load) ([]fleet.Load, int64, bool) {
	if v.loads == nil {
		return dst, 0, false
	}
	if v.fresh {
		v.stamp++
	}
	for _, n := range v.loads {
		dst = append(dst, fleet.Load{Addr: addr, Decode: n})
	}
	return dst, v.stamp, true
}

// With the ranks' scraped loads, a rank's load is its bookings' plus the scrape's
// requests beyond the bookings when the picker first saw that scrape (at least 0), each
// weighed as the scrape's weigh on average; the choice is RankSlack's rule over that.
func TestPickReadsTheRanksScrapedLoads(t *testing.T) {
	const ep = "10.0.0.2:8000"
	tests := []struct {
		name  string
		view  rankScrape
		picks []int // the rank of each successive pick (bookings kept); rank 2 holds the prompt
	}{
		{"no per-rank scrape: the bookings alone", rankScrape{}, []int{2, 2, 0, 1, 3, 2}},
		// Rank 2 at 9 from another replica: past the slack over 0.
		{"another replica's load on the holder", rankScrape{loads: []int{0, 0, 9, 0}}, []int{0, 1, 3, 0}},
		// Rank 2 at 3, then 3 + 4 for the pin since (its bookings alone say 4, within the slack).
		{"pins since the scrape add to it", rankScrape{loads: []int{0, 0, 3, 0}}, []int{2, 0, 1, 3}},
		// Each scrape shows one request on rank 2, the picker's own booking from the second on.
		{"a scrape that counts the picker's own: not twice", rankScrape{loads: []int{0, 0, 1, 0}, fresh: true}, []int{2, 2, 0, 1}},
		{"a scrape that misses the picker's own bookings: the bookings", rankScrape{loads: []int{0, 0, 0, 0}, fresh: true}, []int{2, 2, 0, 1, 3, 2}},
		{"fewer ranks scraped than told apart: the rest on bookings", rankScrape{loads: []int{9, 9}}, []int{2, 2, 3, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			view := tc.view
			p := newPicker(t, Options{Fleet: newFleet(ep), Policy: "kvaware", Engines: &view, RankMetrics: true, Cache: KVEventsView{Index: rankIndex(t, ep, 2, 64), Ranks: 4}})
			if !p.NeedsEngineMetrics() {
				t.Error("NeedsEngineMetrics = false with a RankEngineView over ranks: nothing would scrape them")
			}
			if got := pickRanks(t, p, len(tc.picks)); !slices.Equal(got, tc.picks) {
				t.Errorf("ranks picked %v, want %v", got, tc.picks)
			}
		})
	}
}

// A decoding request weighs a quarter of a waiting one, as in vLLM's balancer.
func TestRankLoadWeighsWaitingFourTimes(t *testing.T) {
	for _, c := range []struct {
		l    fleet.Load
		want int
	}{{fleet.Load{}, 0}, {fleet.Load{Prefill: 1}, 4}, {fleet.Load{Decode: 3}, 3}, {fleet.Load{Prefill: 2, Decode: 1}, 9}} {
		if got := RankLoad(c.l); got != c.want {
			t.Errorf("RankLoad(%+v) = %d, want %d", c.l, got, c.want)
		}
	}
}

func TestRankLoadsFollowTheBookings(t *testing.T) {
	const ep = "10.0.0.2:8000"
	ix := rankIndex(t, ep, 1, 64)
	set := newFleet(ep)
	p := newPicker(t, Options{Fleet: set, Policy: "kvaware", Cache: KVEventsView{Index: ix, Ranks: 2}})
	d, err := p.Pick(context.Background(), Request{Tokens: rankTokens})
	if err != nil {
		t.Fatal(err)
	}
	ranks := func() []fleet.Load { return d.Booking.Ranks(2, nil) }
	if l := ranks(); l[1].Prefill != 1 || l[0].InFlight() != 0 {
		t.Fatalf("after the pick: %+v, want one prefill on rank 1", l)
	}
	d.Booking.Decoding()
	if l := ranks(); l[1].Decode != 1 || l[1].Prefill != 0 {
		t.Fatalf("decoding: %+v, want one decode on rank 1", l)
	}
	d.Booking.Release()
	d.Booking.Release()
	if l := ranks(); l[1].InFlight() != 0 {
		t.Fatalf("released: %+v, want nothing", l)
	}
}

func TestPinRefusesBadRanks(t *testing.T) {
	set := newFleet("10.0.0.2:8000")
	for _, c := range []struct{ rank, ranks int }{{-1, 2}, {2, 2}, {0, 0}, {0, fleet.MaxRanks + 1}} {
		b, err := set.Book("10.0.0.2:8000")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Pin(c.rank, c.ranks); err == nil {
			t.Errorf("Pin(%d, %d) = nil, want an error", c.rank, c.ranks)
		}
		b.Release()
	}
	b, _ := set.Book("10.0.0.2:8000")
	defer b.Release()
	if err := b.Pin(0, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.Pin(1, 2); err == nil {
		t.Error("a second Pin succeeded")
	}
	c, _ := set.Book("10.0.0.2:8000")
	defer c.Release()
	if err := c.Pin(3, 4); err == nil {
		t.Error("Pin past the table's size (pinned with 2 ranks first) succeeded")
	}
}

// Choosing a rank allocates nothing: a decision over ranks, reading their scraped loads,
// allocates what one without ranks does (the view's CacheMatches), once the rank names
// and scratch exist.
func TestRankChoiceAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under -race")
	}
	const ep = "10.0.0.2:8000"
	allocs := func(ranks int) float64 {
		view := &rankScrape{loads: []int{1, 5, 0, 2}}
		p := newPicker(t, Options{Fleet: newFleet(ep, "10.0.0.3:8000"), Engines: view, RankMetrics: true, Cache: KVEventsView{Index: rankIndex(t, ep, 1, 64), Ranks: ranks}})
		var d Decision
		return testing.AllocsPerRun(200, func() {
			if err := p.PickInto(context.Background(), Request{Tokens: rankTokens}, &d); err != nil {
				t.Fatal(err)
			}
			d.Booking.Release()
		})
	}
	if one, four := allocs(1), allocs(4); four > one {
		t.Errorf("a decision over 4 ranks allocates %.1f times, one without ranks %.1f", four, one)
	}
}

// Without Options.RankMetrics the ranks' scraped loads are not read, and nothing needs
// scraping for them.
func TestRankMetricsAreOptIn(t *testing.T) {
	const ep = "10.0.0.2:8000"
	view := &rankScrape{loads: []int{0, 0, 9, 0}}
	p := newPicker(t, Options{Fleet: newFleet(ep), Policy: "kvaware", Engines: view, Cache: KVEventsView{Index: rankIndex(t, ep, 2, 64), Ranks: 4}})
	if p.NeedsEngineMetrics() {
		t.Error("NeedsEngineMetrics = true for kvaware without RankMetrics")
	}
	d, err := p.Pick(context.Background(), Request{Tokens: rankTokens})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Booking.Release()
	if r, _ := d.Rank(); r != 2 {
		t.Errorf("rank %d, want the holder 2 (the scrape's 9 on it not read)", r)
	}
}
