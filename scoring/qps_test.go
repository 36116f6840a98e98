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

// referenceQPSOrder is the QPS fallback's order as a full sort states it: endpoints that
// never received a request first, then the highest score (the lowest rate), then by
// address. Scores are -requests/QPSWindow; never-sent endpoints score -0.
func referenceQPSOrder(in Input, sent map[string]int, ever map[string]bool) []Ranked {
	rs := base(Input{Candidates: in.Candidates}, ReasonQPS)
	for i := range rs {
		rs[i].Score = -float64(sent[rs[i].Addr]) / QPSWindow.Seconds()
	}
	slices.SortFunc(rs, func(a, b Ranked) int {
		if na, nb := !ever[a.Addr], !ever[b.Addr]; na != nb {
			if na {
				return -1
			}
			return 1
		}
		if a.Score != b.Score {
			return cmp.Compare(b.Score, a.Score)
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	return rs
}

// The QPS fallback selects its first entries as the full sort orders them, scores (and
// the sign of a zero) included, for fleets of every size, candidates in address order
// (promised) or not, and every Top.
func TestQPSRankAgreesWithAFullSort(t *testing.T) {
	now := time.Unix(1700000000, 0)
	tests := []struct {
		name          string
		n             int
		neverShare    int // one endpoint in neverShare never received a request (0: none)
		maxRequests   int // the others received 0 (all outside the window) to maxRequests-1 in it
		sorted        bool
		top           int
		wantNeverLead bool
	}{
		{"small fleet, full sort", 40, 3, 4, false, 0, true},
		{"large fleet, most never sent", 3000, 2, 3, false, 0, true},
		{"large fleet, in address order", 3000, 5, 5, true, 0, true},
		{"large fleet, every endpoint sent to, many ties", 2500, 0, 2, true, 33, false},
		{"large fleet, every endpoint never sent", 2000, 1, 1, true, 1, true},
		{"distinct rates", 1200, 0, 400, false, 9, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tt.n), 3))
			st := NewState()
			in := Input{Now: now, Top: tt.top, Sorted: tt.sorted}
			sent, ever := map[string]int{}, map[string]bool{}
			for i := range tt.n {
				a := fmt.Sprintf("10.%d.%d.%d:8000", i/65536, i/256%256, i%256)
				in.Candidates = append(in.Candidates, Candidate{Addr: a, HolderRank: -1})
				if tt.neverShare > 0 && r.IntN(tt.neverShare) == 0 {
					continue
				}
				ever[a] = true
				st.Booked(a, now.Add(-2*QPSWindow)) // sent to, but outside the window
				for range r.IntN(tt.maxRequests) {
					st.Booked(a, now.Add(-time.Second))
					sent[a]++
				}
			}
			if tt.sorted {
				slices.SortFunc(in.Candidates, func(a, b Candidate) int { return strings.Compare(a.Addr, b.Addr) })
			} else {
				r.Shuffle(len(in.Candidates), func(i, j int) { in.Candidates[i], in.Candidates[j] = in.Candidates[j], in.Candidates[i] })
			}
			want := referenceQPSOrder(in, sent, ever)
			got := st.qpsRank(in)
			k := min(in.prefix(), tt.n)
			for i := range k {
				g, w := got[i], want[i]
				if g.Addr != w.Addr || g.Score != w.Score || math.Signbit(g.Score) != math.Signbit(w.Score) || g != w {
					t.Fatalf("entry %d: got %+v, want %+v", i, g, w)
				}
			}
			if lead := !ever[got[0].Addr]; lead != tt.wantNeverLead {
				t.Fatalf("first %s never sent to: %v, want %v", got[0].Addr, lead, tt.wantNeverLead)
			}
			byAddr := func(a, b Ranked) int { return strings.Compare(a.Addr, b.Addr) }
			slices.SortFunc(got, byAddr)
			slices.SortFunc(want, byAddr)
			if !slices.Equal(got, want) {
				t.Fatal("entries were lost, duplicated or changed")
			}
		})
	}
}
