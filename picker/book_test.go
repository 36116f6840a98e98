package picker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/scoring"
)

// A booking refused (the endpoint left the fleet during the decision) goes to the next
// entry of the ranking; a short ranking (Input.Top) is first asked for in full, so the
// next entries are the full ranking's, however many are refused.
func TestBookFirstFollowsTheFullRanking(t *testing.T) {
	set := fleet.New()
	var in scoring.Input
	var addrs []string
	for i := range 200 {
		a := fmt.Sprintf("10.0.%d.%d:8000", i/100, i%100)
		addrs = append(addrs, a)
		in.Candidates = append(in.Candidates, scoring.Candidate{Addr: a, HolderRank: -1, InFlight: i % 7})
	}
	set.Update(addrs)
	slices.SortFunc(in.Candidates, func(a, b scoring.Candidate) int { return strings.Compare(a.Addr, b.Addr) })
	in.Sorted = true
	pol, err := scoring.New("loadaware", scoring.DefaultParams(), scoring.NewState())
	if err != nil {
		t.Fatal(err)
	}
	in.Candidates[5].Matched, in.PromptTokens = 100, 100 // a match, so loadaware scores
	in.PrefixKey = 0x5eed                                // passed to the booking as its tag
	full := pol.Rank(in)
	for _, c := range []struct {
		name    string
		top     int
		refused int // the first entries refused
		want    int // the place booked, in the full ranking; -1: none
	}{
		{"nothing refused, short ranking", 3, 0, 0},
		{"one refused, short ranking", 3, 1, 1},
		{"more refused than the short ranking holds", 3, 9, 9},
		{"refused beyond the full ranking's order", 8, 70, 70},
		{"every one refused", 3, 200, -1},
		{"full ranking", 0, 2, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := in
			in.Top = c.top
			asked := 0
			rank := func(in scoring.Input) []scoring.Ranked { asked++; return pol.Rank(in) }
			book := func(addr string, tag uint64) (*fleet.Booking, error) {
				if tag != in.PrefixKey {
					t.Errorf("booked %s with tag %d, want the prompt's prefix key %d", addr, tag, in.PrefixKey)
				}
				if slices.ContainsFunc(full[:c.refused], func(r scoring.Ranked) bool { return r.Addr == addr }) {
					return nil, errors.New("left")
				}
				return set.Book(addr)
			}
			ranked, i, b := bookFirst(rank(in), in, rank, book)
			if c.want < 0 {
				if b != nil {
					t.Fatalf("booked %s, want nothing", b.Addr())
				}
				return
			}
			if b == nil {
				t.Fatal("nothing booked")
			}
			defer b.Release()
			if b.Addr() != full[c.want].Addr || i != c.want || ranked[i].Addr != full[c.want].Addr {
				t.Fatalf("booked %s at %d, want %s at %d", b.Addr(), i, full[c.want].Addr, c.want)
			}
			if c.refused < 65 && !slices.Equal(ranked[:min(len(ranked), c.want+1)], full[:c.want+1]) {
				t.Fatal("the entries up to the booked one are not the full ranking's")
			}
			if wantAsked := 1 + min(1, c.refused*c.top); asked != wantAsked {
				t.Fatalf("ranked %d times, want %d", asked, wantAsked)
			}
		})
	}
}
