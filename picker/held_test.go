package picker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/scoring"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// denseOnly hides a view's MatchHeld, so the picker takes the dense path.
type denseOnly struct{ CacheView }

// The held path (lookups that cost the holders) decides exactly as the dense path (one
// match per endpoint) over the same index: same endpoints, same ranking, same sources,
// for every policy, with and without a subset, on fleets large enough for the partial
// ranking to apply.
func TestHeldMatchesDecideAsDenseOnes(t *testing.T) {
	for _, n := range []int{3, 200, 1000} {
		bf := newBenchFleet(t, n, max(2, n/3))
		for _, policy := range scoring.Names {
			for _, subset := range [][]string{nil, {bf.addrs[0], bf.addrs[n-1], bf.addrs[n/2]}} {
				t.Run(fmt.Sprintf("endpoints=%d/%s/subset=%d", n, policy, len(subset)), func(t *testing.T) {
					opts := func(c CacheView) Options {
						return Options{Fleet: bf.fleet, Policy: policy, Cache: c, MaxEndpoints: 3}
					}
					held := newPicker(t, opts(LMCacheView{Index: bf.index}))
					dense := newPicker(t, opts(denseOnly{LMCacheView{Index: bf.index}}))
					for i := range 3 {
						req := Request{Tokens: bf.tokens, Subset: subset, Session: fmt.Sprint("s", i%2)}
						if d := decideBoth(t, dense, held, req); d != "" {
							t.Fatalf("decision %d differs (-dense +held):\n%s", i, d)
						}
					}
				})
			}
		}
	}
}

// decideBoth has want and got each decide req (releasing their bookings) and returns the
// difference of the decisions, "" when they are the same.
func decideBoth(t *testing.T, want, got *Picker, req Request) string {
	t.Helper()
	var ds [2]Decision
	for i, p := range []*Picker{want, got} {
		d, err := p.Pick(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		d.Booking.Release()
		d.Booking = nil
		ds[i] = d
	}
	return cmp.Diff(ds[0], ds[1])
}

// A large fleet's decision keeps the best it may be asked about (an explanation's 32, else
// KeptRanked, or MaxEndpoints when more) and counts the rest.
func TestDecisionKeepsTheBestRanked(t *testing.T) {
	bf := newBenchFleet(t, 500, 2)
	for _, c := range []struct {
		maxEndpoints int
		explain      bool
		want         int
	}{
		{4, true, maxExplained},
		{4, false, KeptRanked},
		{12, false, 12},
		{40, true, 40},
	} {
		t.Run(fmt.Sprintf("max-endpoints=%d/explain=%v", c.maxEndpoints, c.explain), func(t *testing.T) {
			p := newPicker(t, Options{Fleet: bf.fleet, Cache: LMCacheView{Index: bf.index}, MaxEndpoints: c.maxEndpoints})
			d, err := p.Pick(context.Background(), Request{Tokens: bf.tokens, Explain: c.explain})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Booking.Release()
			if len(d.Ranked) != c.want || d.Candidates != 500 || len(d.Endpoints) != c.maxEndpoints {
				t.Fatalf("ranked %d, candidates %d, endpoints %d: want %d, 500, %d", len(d.Ranked), d.Candidates, len(d.Endpoints), c.want, c.maxEndpoints)
			}
			if d.Endpoints[0] != bf.holder[0] || (d.Sources[bf.holder[0]] == SourceLMCache) != c.explain {
				t.Fatalf("winner %s (sources %v), want the idle holder %s", d.Endpoints[0], d.Sources, bf.holder[0])
			}
			if more := fmt.Sprintf("(+%d more)", 500-min(c.want, maxExplained)); !strings.Contains(d.Explain(), more) {
				t.Fatalf("explanation %q does not end with %s", d.Explain(), more)
			}
		})
	}
}

// Over the whole fleet, loadaware ranks its leaders only (the holders and the least
// loaded others): its decisions are those of the dense path, which ranks every endpoint,
// on fleets whose loads are random, whose holders hold different lengths of the prompt
// and are sometimes the busiest, for every number of endpoints kept and with an
// explanation's longer list; and the leaders' path is the one taken, as its metric says.
func TestLeadersDecideAsTheWholeFleet(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{2, 300, 2000} {
		for _, busyHolders := range []bool{false, true} {
			bf := newBenchFleet(t, n, max(1, n/7))
			for i, a := range bf.fleet.View().Addrs() {
				busy := rng.IntN(6)
				if busyHolders && slices.Contains(bf.holder, a) {
					busy = 20 + i%3
				}
				for range busy {
					if _, err := bf.fleet.Book(a); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, maxEndpoints := range []int{1, 3, 20} {
				t.Run(fmt.Sprintf("endpoints=%d/busy-holders=%v/max-endpoints=%d", n, busyHolders, maxEndpoints), func(t *testing.T) {
					leadersDecideAsDense(t, bf, maxEndpoints, 0.5, func(i int) int { return 256*(1+i%6) + i })
				})
			}
		}
	}
}

// Holders of different lengths of the prompt: the leaders' path keeps, of each length, only
// the least loaded holders (holderLeaders), and decides as the dense path does, whether the
// longest holders are idle or the busiest, for every number of endpoints kept and with an
// explanation's longer list.
// leadersDecideAsDense makes six decisions (prompts of bf.tokens[:length(i)], every other
// one explained) on a picker ranking the leaders and on one ranking every candidate, over
// bf's fleet and index, and fails unless they agree and the first ranked the leaders only.
func leadersDecideAsDense(t *testing.T, bf *benchFleet, maxEndpoints int, beta float64, length func(i int) int) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	opts := func(c CacheView, reg prometheus.Registerer) Options {
		return Options{Fleet: bf.fleet, Cache: c, MaxEndpoints: maxEndpoints, Params: scoring.Params{Beta: beta, KVThreshold: 2000}, Registerer: reg}
	}
	leaders := newPicker(t, opts(LMCacheView{Index: bf.index}, reg))
	dense := newPicker(t, opts(denseOnly{LMCacheView{Index: bf.index}}, nil))
	for i := range 6 {
		req := Request{Tokens: bf.tokens[:length(i)], Explain: i%2 == 1}
		if d := decideBoth(t, dense, leaders, req); d != "" {
			t.Fatalf("decision %d differs (-whole +leaders):\n%s", i, d)
		}
	}
	if got := testutil.ToFloat64(leaders.metrics.rankings.WithLabelValues("leaders")); got != 6 {
		t.Fatalf("%v of 6 decisions ranked the leaders only", got)
	}
}

func TestLeadersAmongHoldersOfManyLengths(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, c := range []struct {
		n, every, lengths int
		busyLongest       bool
	}{
		{600, 3, 7, false},
		{600, 3, 7, true},
		{900, 2, 3, true},
		{300, 1, 1, false},
	} {
		bf := newBenchFleet(t, c.n, 1)
		keys := bf.index.ChunkKeys(bf.tokens)
		for i, a := range bf.fleet.View().Addrs() {
			held := 0
			if i%c.every == 0 {
				held = 1 + (i/c.every)%c.lengths*len(keys)/c.lengths
				held = min(held, len(keys))
			}
			if i == 0 {
				held = 0 // the benchmark fleet's own holder: made to hold nothing here
			}
			var ops []lmcache.KVOp
			for j, k := range keys {
				op := lmcache.OpEvict
				if j < held {
					op = lmcache.OpAdmit
				}
				ops = append(ops, lmcache.KVOp{Op: op, Key: k})
			}
			if err := bf.index.Apply(lmcache.BatchedKVOperationMsg{InstanceID: fmt.Sprint("vllm-", i), Location: "LocalCPUBackend", Operations: ops}, benchNow); err != nil {
				t.Fatal(err)
			}
			busy := rng.IntN(5)
			if c.busyLongest && held == len(keys) {
				busy = 10 + rng.IntN(4)
			}
			for range busy {
				if _, err := bf.fleet.Book(a); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, maxEndpoints := range []int{1, 3, 20} {
			t.Run(fmt.Sprintf("endpoints=%d/every=%d/lengths=%d/busy-longest=%v/max-endpoints=%d", c.n, c.every, c.lengths, c.busyLongest, maxEndpoints), func(t *testing.T) {
				leadersDecideAsDense(t, bf, maxEndpoints, 0.3, func(i int) int { return 256*(2+i%5) + i })
			})
		}
	}
}

// While the endpoint set changes under the decisions (the holders leave and come back), a
// decision whose leader left since its view books another endpoint, never failing while
// the set has endpoints: a refused leader sends the decision to the whole ranking.
func TestLeadersWhileTheSetChanges(t *testing.T) {
	bf := newBenchFleet(t, 300, 30)
	all := bf.fleet.View().Addrs()
	var rest []string
	for _, a := range all {
		if !slices.Contains(bf.holder, a) {
			rest = append(rest, a)
		}
	}
	p := newPicker(t, Options{Fleet: bf.fleet, Cache: LMCacheView{Index: bf.index}})
	stop := make(chan struct{})
	changed := make(chan struct{})
	go func() {
		defer close(changed)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				bf.fleet.Update(rest)
			} else {
				bf.fleet.Update(all)
			}
		}
	}()
	for i := range 3000 {
		d, err := p.Pick(context.Background(), Request{Tokens: bf.tokens})
		if err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
		d.Booking.Release()
	}
	close(stop)
	<-changed
	leaders := testutil.ToFloat64(p.metrics.rankings.WithLabelValues("leaders"))
	whole := testutil.ToFloat64(p.metrics.rankings.WithLabelValues("whole"))
	t.Logf("%v decisions ranked the leaders, %v the whole fleet", leaders, whole)
	if leaders == 0 || leaders+whole < 3000 {
		t.Fatalf("%v leaders' rankings and %v whole ones for 3000 decisions", leaders, whole)
	}
}

// usableOnly hides fleet.Health's Unhealthy: a picker given it asks Usable of every
// decision's candidates, the path without the kept usable view.
type usableOnly struct{ h *fleet.Health }

func (u usableOnly) Usable(addrs []string, now time.Time) ([]string, bool) {
	return u.h.Usable(addrs, now)
}

// With some endpoints ejected (holders among them, and the idlest), loadaware's leaders
// over the view less the ejected decide as the dense path over the candidates Usable
// leaves, and never route to an ejected endpoint; the leaders' path is the one taken. When
// every endpoint is ejected, both route among all of them (the note says so).
func TestLeadersDecideAsTheWholeFleetWithSomeEjected(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	now := time.Unix(7000, 0)
	for _, n := range []int{3, 300, 2000} {
		bf := newBenchFleet(t, n, max(2, n/7))
		addrs := bf.fleet.View().Addrs()
		idle := map[string]bool{}
		for _, a := range addrs {
			busy := rng.IntN(6)
			idle[a] = busy == 0
			for range busy {
				if _, err := bf.fleet.Book(a); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, ejected := range []int{1, 2, 9, n} {
			if ejected > n {
				continue
			}
			t.Run(fmt.Sprintf("endpoints=%d/ejected=%d", n, ejected), func(t *testing.T) {
				h := fleet.NewHealth(fleet.HealthPolicy{PassiveFailures: 1, Ejection: time.Hour})
				var out []string
				if ejected < n {
					out = append(out, bf.holder[0]) // a holder
					for _, a := range addrs {
						if len(out) < ejected && !slices.Contains(out, a) && idle[a] {
							out = append(out, a) // idle ones: the least loaded are ejected too
						}
					}
					for _, i := range rng.Perm(n) {
						if len(out) < ejected && !slices.Contains(out, addrs[i]) {
							out = append(out, addrs[i])
						}
					}
				} else {
					out = addrs
				}
				for _, a := range out {
					h.Passive(a, false, "", now, now)
				}
				reg := prometheus.NewPedanticRegistry()
				opts := func(c CacheView, hv HealthView, reg prometheus.Registerer) Options {
					return Options{Fleet: bf.fleet, Cache: c, Health: hv, Now: func() time.Time { return now },
						MaxEndpoints: 3, Params: scoring.Params{Beta: 0.5, KVThreshold: 2000}, Registerer: reg}
				}
				leaders := newPicker(t, opts(LMCacheView{Index: bf.index}, h, reg))
				dense := newPicker(t, opts(denseOnly{LMCacheView{Index: bf.index}}, usableOnly{h}, nil))
				for i := range 6 {
					req := Request{Tokens: bf.tokens[:256*(1+i%6)+i], Explain: i%2 == 1}
					if d := decideBoth(t, dense, leaders, req); d != "" {
						t.Fatalf("decision %d differs (-usable +leaders):\n%s", i, d)
					}
					d, err := leaders.Pick(context.Background(), req)
					if err != nil {
						t.Fatal(err)
					}
					d.Booking.Release()
					if dd, err := dense.Pick(context.Background(), req); err == nil { // the same history for both
						dd.Booking.Release()
					}
					if ejected < n && slices.Contains(out, d.Endpoints[0]) {
						t.Fatalf("decision %d went to %s, which is ejected", i, d.Endpoints[0])
					}
					if want := n - ejected; ejected < n && d.Candidates != want {
						t.Fatalf("decision %d had %d candidates, want %d", i, d.Candidates, want)
					}
				}
				// Every decision of leaders (decideBoth's and the check's) ranked the leaders
				// (with every endpoint ejected, those of the whole view), unless every holder
				// was ejected: loadaware's ranking is then its fallback's, over every candidate.
				want := 0.0
				for _, a := range bf.holder {
					if ejected == n || !slices.Contains(out, a) {
						want = 12
					}
				}
				if got := testutil.ToFloat64(leaders.metrics.rankings.WithLabelValues("leaders")); got != want {
					t.Fatalf("%v of 12 decisions ranked the leaders only, want %v", got, want)
				}
			})
		}
	}
}

// holderLeaders keeps, per matched length (capped at the prompt), the n least loaded
// holders, smaller places first on equal loads; it leaves every holder a candidate (nil)
// when there are 2n or fewer, or more lengths than it sorts out.
func TestHolderLeaders(t *testing.T) {
	type kept struct{ Matched, Load, Place int }
	holders := func(n int, f func(i int) kept) ([]Held, []int) {
		var held []Held
		var loads []int
		for i := range n {
			k := f(i)
			held = append(held, Held{Endpoint: k.Place, CacheMatch: CacheMatch{Matched: k.Matched}})
			loads = append(loads, k.Load)
		}
		return held, loads
	}
	for _, c := range []struct {
		name   string
		n      int
		prompt int
		each   func(i int) kept
		count  int
		want   [][]kept // per level, in order; nil: every holder a candidate
	}{
		{"too few to sort", 3, 1000, func(i int) kept { return kept{256, i, i} }, 6, nil},
		{"one length, ties to the smaller place", 2, 1000, func(i int) kept { return kept{256, 5 - i%3, 10 - i} }, 9,
			[][]kept{{{256, 3, 2}, {256, 3, 5}}}},
		{"lengths past the prompt are one length", 2, 300, func(i int) kept { return kept{256 * (1 + i%3), i, i} }, 9,
			[][]kept{{{256, 0, 0}, {256, 3, 3}}, {{300, 1, 1}, {300, 2, 2}}}},
		{"more lengths than it sorts out", 1, 1 << 20, func(i int) kept { return kept{1 + i, 0, i} }, maxBenefitLevels + 1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			held, loads := holders(c.count, c.each)
			var rs rankScratch
			got := rs.holderLeaders(held, loads, func(e int) int { return e }, c.prompt, c.n)
			var out [][]kept
			for _, l := range got {
				var ks []kept
				for _, e := range l.best {
					if held[e.held].Endpoint != int(e.place) || loads[e.held] != e.load {
						t.Fatalf("entry %+v does not name its holder", e)
					}
					ks = append(ks, kept{l.matched, e.load, int(e.place)})
				}
				out = append(out, ks)
			}
			if d := cmp.Diff(c.want, out); d != "" {
				t.Fatalf("kept (-want +got):\n%s", d)
			}
		})
	}
}
