package replica

import (
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// TestLoadViewHeals drives the load view with peer messages and scrapes, one behaviour
// per case, and reads the remote share of one endpoint's load.
func TestLoadViewHeals(t *testing.T) {
	const ep = "10.0.0.1:8000"
	t0 := time.Unix(1000, 0)
	delta := func(origin, seq uint64, op DeltaOp) Message {
		return Message{Kind: KindDelta, Origin: origin, Seq: seq, Addr: ep, Op: op}
	}
	state := func(origin, seq uint64, prefill, decode int) Message {
		return Message{Kind: KindState, Origin: origin, Seq: seq, Loads: []fleet.Load{{Addr: ep, Prefill: prefill, Decode: decode}}}
	}
	type scrape struct{ count, booksBefore int }
	tests := []struct {
		name     string
		local    int
		msgs     []Message
		scrapes  []scrape
		expireAt time.Duration // 0: no expiry pass
		fallback bool
		want     int
		keep     int // scrapes in the ceiling window; 0: 2
	}{
		{"deltas add up", 0, []Message{delta(1, 1, OpBook), delta(1, 2, OpBook), delta(2, 1, OpBook)}, nil, 0, false, 3, 0},
		{"release removes", 0, []Message{delta(1, 1, OpBook), delta(1, 2, OpDecoding), delta(1, 3, OpReleaseDecode)}, nil, 0, false, 0, 0},
		{"a state replaces lost deltas", 0, []Message{delta(1, 1, OpBook), delta(1, 3, OpBook), state(1, 4, 0, 1)}, nil, 0, false, 1, 0},
		{"an older message is stale", 0, []Message{state(1, 5, 2, 0), delta(1, 4, OpBook)}, nil, 0, false, 2, 0},
		{"a silent peer expires", 0, []Message{state(1, 1, 3, 0), state(2, 1, 1, 0)}, nil, time.Second, false, 0, 0},
		{"the engines' count caps phantom bookings", 0, []Message{state(1, 1, 0, 5)}, []scrape{{1, 0}, {1, 0}}, 0, false, 1, 0},
		{"bookings since the older scrape are allowed", 0, []Message{delta(1, 1, OpBook), delta(1, 2, OpBook)}, []scrape{{0, 0}, {0, 0}}, 0, false, 2, 0},
		{"one scrape does not cap", 0, []Message{state(1, 1, 0, 5)}, []scrape{{1, 0}}, 0, false, 5, 0},
		{"this picker's own requests are not the peers'", 2, []Message{state(1, 1, 0, 3)}, []scrape{{3, 0}, {3, 0}}, 0, false, 1, 0},
		{"NATS down: the engine's count less ours stands in", 1, nil, []scrape{{4, 0}}, 0, true, 3, 0},
		// An engine that has not counted two bookings for two scrapes (its gauges lag a
		// long step): a window of two scrapes cuts them, one of three does not.
		{"a lag longer than the window cuts real bookings", 0, []Message{delta(1, 1, OpBook), delta(1, 2, OpBook)}, []scrape{{0, 0}, {0, 2}, {0, 2}}, 0, false, 0, 2},
		{"a window longer than the lag keeps them", 0, []Message{delta(1, 1, OpBook), delta(1, 2, OpBook)}, []scrape{{0, 0}, {0, 2}, {0, 2}}, 0, false, 2, 3},
		{"the ceiling is the window's largest count", 0, []Message{state(1, 1, 0, 5)}, []scrape{{4, 0}, {1, 0}, {1, 0}}, 0, false, 4, 3},
		{"a leaked booking is cut once the window has passed it", 0, []Message{state(1, 1, 0, 5)}, []scrape{{4, 0}, {1, 0}, {1, 0}, {1, 0}}, 0, false, 1, 3},
		{"a window not yet full does not cap", 0, []Message{state(1, 1, 0, 5)}, []scrape{{1, 0}, {1, 0}}, 0, false, 5, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			met, err := newMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			f := fleet.New()
			f.Update([]string{ep})
			for range tc.local {
				if _, err := f.Book(ep); err != nil {
					t.Fatal(err)
				}
			}
			v := newLoadView(f, met, 500*time.Millisecond, tc.keep)
			for _, m := range tc.msgs {
				v.apply(m, t0)
			}
			for _, s := range tc.scrapes {
				v.scraped(ep, s.count, uint64(s.booksBefore))
			}
			if tc.fallback {
				v.setFallback(true)
			}
			if tc.expireAt > 0 {
				v.expire(t0.Add(tc.expireAt))
			}
			if got := remote(f, ep); got != tc.want {
				t.Errorf("remote in-flight = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCeilingScrapes(t *testing.T) {
	tests := []struct {
		window, interval time.Duration
		want             int
	}{
		{2 * time.Second, 250 * time.Millisecond, 9},
		{time.Second, 300 * time.Millisecond, 5},
		{100 * time.Millisecond, 250 * time.Millisecond, 2},
		{2 * time.Second, 0, 2},
	}
	for _, tc := range tests {
		if got := ceilingScrapes(tc.window, tc.interval); got != tc.want {
			t.Errorf("ceilingScrapes(%v, %v) = %d, want %d", tc.window, tc.interval, got, tc.want)
		}
	}
}
