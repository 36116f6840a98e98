package sim

import (
	"container/heap"
	"testing"
	"time"
)

func newDP(t *testing.T, ranks int) *DP {
	t.Helper()
	d, err := NewDP(DefaultConfig(), keys(t), ranks)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// endHeap orders step ends as an event queue does: by time, then by the order given.
type stepEnd struct {
	at  time.Duration
	seq int
}
type endHeap []stepEnd

func (h endHeap) Len() int { return len(h) }
func (h endHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || (h[i].at == h[j].at && h[i].seq < h[j].seq)
}
func (h endHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)   { *h = append(*h, x.(stepEnd)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// runDP runs d until idle as vtime does (Start until false, Finish at each end in
// order) and returns every finished request's rank and first-token time, by ID.
func runDP(t *testing.T, d *DP) map[string]struct {
	rank int
	ttft time.Duration
} {
	t.Helper()
	out := map[string]struct {
		rank int
		ttft time.Duration
	}{}
	var h endHeap
	seq := 0
	kick := func(now time.Duration) {
		for {
			end, ok := d.Start(now)
			if !ok {
				return
			}
			seq++
			heap.Push(&h, stepEnd{end, seq})
		}
	}
	kick(0)
	for n := 0; h.Len() > 0; n++ {
		if n > 100000 {
			t.Fatal("never idle")
		}
		ev := heap.Pop(&h).(stepEnd)
		o := d.Finish()
		if o.At != ev.at {
			t.Fatalf("Finish at %v reported a step ending %v", ev.at, o.At)
		}
		for _, r := range o.Finished {
			out[r.ID] = struct {
				rank int
				ttft time.Duration
			}{o.Rank, r.TokenTimes[0]}
		}
		kick(ev.at)
	}
	if _, busy := d.Busy(); busy {
		t.Fatal("busy after the last step")
	}
	return out
}

func TestDPRoutesPinnedAndBalancedRequests(t *testing.T) {
	tests := []struct {
		name  string
		ranks int
		pins  []int // each request's PinRank
		want  []int // each request's rank
	}{
		{"the balancer fills ranks in order", 4, []int{0, 0, 0, 0, 0}, []int{0, 1, 2, 3, 0}},
		{"pins are kept", 4, []int{3, 3, 1}, []int{2, 2, 0}},
		{"the balancer avoids pinned ranks", 2, []int{1, 1, 0}, []int{0, 0, 1}},
		{"one rank takes everything", 1, []int{0, 1, 0}, []int{0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDP(t, tc.ranks)
			for i, pin := range tc.pins {
				r := &Request{ID: string(rune('a' + i)), Tokens: prompt(uint32(i+1), 300), MaxTokens: 4, PinRank: pin}
				if err := d.Add(r); err != nil {
					t.Fatal(err)
				}
			}
			got := runDP(t, d)
			for i, want := range tc.want {
				if r := got[string(rune('a'+i))].rank; r != want {
					t.Errorf("request %d ran on rank %d, want %d", i, r, want)
				}
			}
		})
	}
}

func TestDPRefusesARankOutOfRange(t *testing.T) {
	d := newDP(t, 2)
	for _, pin := range []int{3, -1} {
		if err := d.Add(&Request{ID: "x", Tokens: prompt(1, 10), MaxTokens: 1, PinRank: pin}); err == nil {
			t.Errorf("PinRank %d accepted on 2 ranks", pin)
		}
	}
	if _, err := NewDP(DefaultConfig(), keys(t), MaxDPRanks+1); err == nil {
		t.Error("NewDP accepted more than MaxDPRanks")
	}
}

// One rank is its Engine exactly; ranks run side by side, so requests spread over
// two ranks finish sooner than on one.
func TestDPOfOneRankIsTheEngine(t *testing.T) {
	reqs := func() []*Request {
		var rs []*Request
		for i := range 6 {
			rs = append(rs, &Request{ID: string(rune('a' + i)), Tokens: prompt(uint32(i%2+1), 1500), MaxTokens: 8})
		}
		return rs
	}
	e := newEngine(t, DefaultConfig())
	add(t, e, reqs()...)
	end, _ := drain(t, e, 0)
	want := e.Metrics()

	for _, n := range []int{1, 2} {
		d := newDP(t, n)
		for _, r := range reqs() {
			if err := d.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		got := runDP(t, d)
		var last time.Duration
		for _, v := range got {
			last = max(last, v.ttft)
		}
		m := d.Metrics()
		switch {
		case n == 1 && (m.Steps != want.Steps || m.PrefixHits != want.PrefixHits):
			t.Errorf("one rank: %d steps, %d hit tokens; the engine %d, %d", m.Steps, m.PrefixHits, want.Steps, want.PrefixHits)
		case n == 2 && last >= end:
			t.Errorf("two ranks: last first token at %v, not before one engine's end %v", last, end)
		}
	}
}
