package scoring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tt.n), uint64(tt.k)))
			rs := make([]Ranked, tt.n)
			for i := range rs {
				rs[i] = Ranked{Addr: fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250), Score: float64(r.IntN(tt.distinct)) / 7}
			}
			if !strings.Contains(tt.name, "address order") {
				r.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
			} else {
				slices.SortFunc(rs, func(a, b Ranked) int { return strings.Compare(a.Addr, b.Addr) })
			}
			want := slices.Clone(rs)
			slices.SortFunc(want, func(a, b Ranked) int { return byScore(&a, &b) })
			got := slices.Clone(rs)
			sortTop(got, tt.k)
			k := min(tt.k, tt.n)
			if !slices.Equal(got[:k], want[:k]) {
				t.Fatalf("first %d differ:\n got %v\nwant %v", k, got[:min(k, 5)], want[:min(k, 5)])
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
