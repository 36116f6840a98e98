package scoring

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// sortTop must give the first k entries of a full sort, in order, and keep every entry.
func TestSortTopAgreesWithAFullSort(t *testing.T) {
	tests := []struct {
		name     string
		n, k     int
		distinct int // distinct scores drawn from (ties broken by address)
	}{
		{"fewer than twice k: everything sorted", 100, 65, 1000},
		{"a large fleet of distinct scores", 5000, 65, 1 << 30},
		{"a large fleet where most scores tie", 5000, 65, 3},
		{"every score equal: address order", 3000, 65, 1},
		{"k of one", 1000, 1, 10},
		{"k above the inline buffers", 2000, 300, 50},
		{"candidates in address order", 3000, 65, 4},
		{"in address order, most scores tie", 5000, 33, 3},
		{"in address order, every score equal", 3000, 9, 1},
		{"in address order, k of one", 1000, 1, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tt.n), uint64(tt.k)))
			rs := make([]Ranked, tt.n)
			for i := range rs {
				rs[i] = Ranked{Addr: fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250), Score: float64(r.IntN(tt.distinct)) / 7}
			}
			sorted := strings.Contains(tt.name, "address order")
			if !sorted {
				r.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
			} else {
				slices.SortFunc(rs, func(a, b Ranked) int { return strings.Compare(a.Addr, b.Addr) })
			}
			want := slices.Clone(rs)
			slices.SortFunc(want, func(a, b Ranked) int { return byScore(&a, &b) })
			got := slices.Clone(rs)
			sortTop(got, tt.k, sorted)
			k := min(tt.k, tt.n)
			if !slices.Equal(got[:k], want[:k]) {
				t.Fatalf("first %d differ:\n got %v\nwant %v", k, got[:min(k, 5)], want[:min(k, 5)])
			}
			if sorted { // the promise only saves comparisons: without it, the same result
				unpromised := slices.Clone(rs)
				sortTop(unpromised, tt.k, false)
				if !slices.Equal(got, unpromised) {
					t.Fatal("sortTop with and without the address-order promise differ")
				}
			}
			byAddr := func(a, b Ranked) int { return strings.Compare(a.Addr, b.Addr) }
			slices.SortFunc(got, byAddr)
			slices.SortFunc(want, byAddr)
			if !slices.Equal(got, want) {
				t.Fatal("entries were lost or duplicated")
			}
		})
	}
}

// A ranking built in Input.Scratch aliases it and equals the one built without.
func TestRankInScratch(t *testing.T) {
	in := Input{PromptTokens: 100}
	for i := range 300 {
		in.Candidates = append(in.Candidates, Candidate{Addr: fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250), Matched: i % 7 * 10, HolderRank: -1, InFlight: i % 5})
	}
	p, err := New("loadaware", DefaultParams(), NewState())
	if err != nil {
		t.Fatal(err)
	}
	want := p.Rank(in)
	in.Scratch = make([]Ranked, 0, len(in.Candidates))
	got := p.Rank(in)
	if &got[0] != &in.Scratch[:1][0] {
		t.Fatal("the ranking was not built in the scratch")
	}
	if !slices.Equal(got[:TopRanked], want[:TopRanked]) {
		t.Fatal("the ranking in scratch differs")
	}
}

// With the address-order promise, ties go by place exactly as they go by address without
// it, for scores that are not ordinary numbers too (NaN ties with everything in byScore,
// infinities tie with themselves).
func TestSortTopSortedAgreesOnOddScores(t *testing.T) {
	odd := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, 1, 1 + scoreEpsilon/2, -1}
	r := rand.New(rand.NewPCG(7, 11))
	rs := make([]Ranked, 2000)
	for i := range rs {
		rs[i] = Ranked{Addr: fmt.Sprintf("10.%d.%d.%d:8000", i/65536, i/256%256, i%256), Score: odd[r.IntN(len(odd))]}
	}
	slices.SortFunc(rs, func(a, b Ranked) int { return strings.Compare(a.Addr, b.Addr) })
	for _, k := range []int{1, 9, 33, 65} {
		a, b := slices.Clone(rs), slices.Clone(rs)
		sortTop(a, k, true)
		sortTop(b, k, false)
		for i := range a {
			if a[i].Addr != b[i].Addr {
				t.Fatalf("k=%d: entry %d is %s with the promise, %s without", k, i, a[i].Addr, b[i].Addr)
			}
		}
	}
}

// A ranking asked for its first Top entries has those of the full ranking (Top 0), in
// the same order, for every policy; the candidates' address order, promised, changes
// nothing either.
func TestTopAndSortedKeepTheLeadingEntries(t *testing.T) {
	in := Input{PromptTokens: 100, Now: time.Unix(1700000000, 0)}
	for i := range 500 {
		in.Candidates = append(in.Candidates, Candidate{Addr: fmt.Sprintf("10.0.%d.%d:8000", i/256, i%256), Matched: i % 7 * 10 % 30, HolderRank: -1, InFlight: i % 5, Decode: i % 3})
	}
	shuffled := slices.Clone(in.Candidates)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	slices.SortFunc(in.Candidates, func(a, b Candidate) int { return strings.Compare(a.Addr, b.Addr) })
	for _, name := range Names {
		for _, sorted := range []bool{true, false} {
			for _, top := range []int{1, 3, 32, 33} {
				full, err := New(name, DefaultParams(), NewState())
				if err != nil {
					t.Fatal(err)
				}
				part, _ := New(name, DefaultParams(), NewState())
				in := in
				if !sorted {
					in.Candidates = shuffled
				}
				want := full.Rank(in)
				pin := in
				pin.Top, pin.Sorted = top, sorted
				got := part.Rank(pin)
				if len(got) < top+1 || len(got) > len(want) {
					t.Fatalf("%s, Top %d: %d entries of %d", name, top, len(got), len(want))
				}
				if !slices.Equal(got[:top+1], want[:top+1]) {
					t.Fatalf("%s, sorted %v, Top %d: first entries differ:\n got %v\nwant %v", name, sorted, top, got[:top+1], want[:top+1])
				}
			}
		}
	}
}

// loadaware's ranking of a large fleet, selected while scoring (Input.Top), is sortTop's
// of the whole ranking, ties and near-ties of scores included: beta and loads make many
// candidates score alike, and a third of them hold some of the prompt.
func TestLoadAwareSelectsAsTheFullRanking(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, beta := range []float64{0, 0.1, 1, 3} {
		for _, sorted := range []bool{true, false} {
			in := Input{PromptTokens: 1578}
			for i := range 3000 {
				c := Candidate{Addr: fmt.Sprintf("10.%d.%d.%d:8000", i/65536, i/256%256, i%256), HolderRank: -1, InFlight: r.IntN(4)}
				if r.IntN(3) == 0 {
					c.Matched, c.HolderRank = 256*r.IntN(8), i
				}
				in.Candidates = append(in.Candidates, c)
			}
			if sorted {
				slices.SortFunc(in.Candidates, func(a, b Candidate) int { return strings.Compare(a.Addr, b.Addr) })
			} else {
				r.Shuffle(len(in.Candidates), func(i, j int) { in.Candidates[i], in.Candidates[j] = in.Candidates[j], in.Candidates[i] })
			}
			p := &LoadAware{Beta: beta, state: NewState()}
			want := p.Rank(in)
			for _, top := range []int{1, 8, 33, TopRanked} {
				pin := in
				pin.Top, pin.Sorted = top, sorted
				got := p.Rank(pin)
				n := min(top+1, sortedPrefix)
				if len(got) != n || !slices.Equal(got, want[:n]) {
					t.Fatalf("beta %v, sorted %v, Top %d: got %d entries %v\nwant %v", beta, sorted, top, len(got), got[:min(3, len(got))], want[:3])
				}
			}
		}
	}
}

// LoadAware.Leaders and RanksLeaders: ranking the holders and the n least loaded others, with the fleet's
// population, leads as the ranking of every endpoint does, whenever it says ok (holders
// that lead, and overloaded holders that the others pass); and it says not ok where the
// endpoints holding nothing would tie (beta 0, or too small).
func TestLoadAwareLeadersLeadAsTheWholeFleet(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, beta := range []float64{0, 1e-12, 0.01, 0.1, 1, 3} {
		for _, holders := range []int{1, 2, 40, 1000, -2, -40} { // negative: that many, every one overloaded
			hot := holders < 0
			holders = max(holders, -holders)
			in := Input{PromptTokens: 1578}
			sum := 0
			for i := range 3000 {
				c := Candidate{Addr: fmt.Sprintf("10.%d.%d.%d:8000", i/65536, i/256%256, i%256), HolderRank: -1, InFlight: r.IntN(4)}
				if r.IntN(50) == 0 {
					c.InFlight = 2000 + r.IntN(3)
				}
				sum += c.InFlight
				in.Candidates = append(in.Candidates, c)
			}
			slices.SortFunc(in.Candidates, func(a, b Candidate) int { return strings.Compare(a.Addr, b.Addr) }) // as the fleet gives them
			for _, i := range r.Perm(len(in.Candidates))[:holders] {
				in.Candidates[i].Matched, in.Candidates[i].HolderRank = 256*(1+r.IntN(7)), i
				if hot {
					sum += 5000 - in.Candidates[i].InFlight
					in.Candidates[i].InFlight = 5000
				}
			}
			p := &LoadAware{Beta: beta, state: NewState()}
			fleet := Population{Endpoints: len(in.Candidates), InFlight: sum}
			for _, top := range []int{1, 8, TopRanked} {
				whole := in
				whole.Top, whole.Sorted = top, true
				n, ok := p.Leaders(whole), p.RanksLeaders(fleet)
				if wantOK := beta > 1e-6; ok != wantOK {
					t.Fatalf("beta %v: Leaders ok = %v, want %v", beta, ok, wantOK)
				}
				if !ok {
					continue
				}
				want := p.Rank(whole)
				var held, others []Candidate
				for _, c := range in.Candidates {
					if c.HolderRank >= 0 {
						held = append(held, c)
					} else {
						others = append(others, c)
					}
				}
				slices.SortStableFunc(others, func(a, b Candidate) int { return cmp.Compare(a.InFlight, b.InFlight) })
				// The holders all, and (the contract's second part) of each matched length
				// only the n least loaded, then smallest address.
				byLength := map[int][]Candidate{}
				for _, c := range held { // in address order
					m := min(c.Matched, in.PromptTokens)
					byLength[m] = append(byLength[m], c)
				}
				var leading []Candidate
				for _, cs := range byLength {
					slices.SortStableFunc(cs, func(a, b Candidate) int { return cmp.Compare(a.InFlight, b.InFlight) })
					leading = append(leading, cs[:min(n, len(cs))]...)
				}
				for _, hs := range [][]Candidate{held, leading} {
					sub := whole
					sub.Candidates = append(slices.Clone(hs), others[:n]...)
					r.Shuffle(len(sub.Candidates), func(i, j int) { sub.Candidates[i], sub.Candidates[j] = sub.Candidates[j], sub.Candidates[i] })
					sub.Sorted, sub.Fleet = false, fleet
					got := p.Rank(sub)
					k := min(top+1, sortedPrefix)
					if len(got) < k || !slices.Equal(got[:k], want[:k]) {
						d := 0
						for d < min(len(got), k) && got[d] == want[d] {
							d++
						}
						t.Fatalf("beta %v, %d holders (%d ranked), Top %d: the leaders' ranking (%d entries) differs from the whole fleet's at entry %d of %d: %v\nwant %v", beta, holders, len(hs), top, len(got), d, k, got[min(d, len(got)-1)], want[d])
					}
				}
			}
		}
	}
}
