package picker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/scoring"
)

// ttftaware sees the uncached tokens the picker booked before: a second unheld prompt
// avoids the endpoint whose first one is still in prefill, and the explain header shows the
// estimate and the queued work, and no beta (ttftaware has none).
func TestTTFTAwareSeesBookedPrefillAndExplainsItsTerms(t *testing.T) {
	p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:8000", "10.0.0.2:8000"), Policy: "ttftaware", Cache: mapCache{}})
	tokens := make([]uint32, 4000)
	d1, err := p.Pick(context.Background(), Request{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Booking.Release()
	d2, err := p.Pick(context.Background(), Request{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Booking.Release()
	if d1.Endpoints[0] != "10.0.0.1:8000" || d2.Endpoints[0] != "10.0.0.2:8000" {
		t.Fatalf("routed to %s then %s, want 10.0.0.1:8000 then 10.0.0.2:8000", d1.Endpoints[0], d2.Endpoints[0])
	}
	ex := d2.Explain()
	// 10.0.0.1 has one request of 4,000 uncached tokens queued: 25 ms + 4,000 x 0.198 ms.
	for _, want := range []string{"policy=ttftaware winner=10.0.0.2:8000 reason=lowest-ttft", "10.0.0.1:8000 matched=0 inflight=1", "queued=0.817", "est_ttft="} {
		if !strings.Contains(ex, want) {
			t.Errorf("explain %q lacks %q", ex, want)
		}
	}
	if strings.Contains(ex, "beta=") {
		t.Errorf("explain %q shows a beta ttftaware does not use", ex)
	}
}

// With an index that shows nothing (mapCache{} holds no blocks), ttftaware presumes a
// prompt held where its prefix key last went: a repeat goes back there, the explain header
// shows the presumed tokens, and the request is booked with what it still has to prefill
// (0), not its whole prompt, which the next decision sees as that endpoint's queued work.
func TestTTFTAwarePresumesTheLastRouteAndBooksItsHit(t *testing.T) {
	p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:8000", "10.0.0.2:8000"), Policy: "ttftaware", Cache: mapCache{}})
	prompt, other := make([]uint32, 4000), filled(4000, 7)
	d1, err := p.Pick(context.Background(), Request{Tokens: prompt})
	if err != nil {
		t.Fatal(err)
	}
	d1.Booking.Release()
	d2, err := p.Pick(context.Background(), Request{Tokens: prompt, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Booking.Release()
	if d1.Endpoints[0] != "10.0.0.1:8000" || d2.Endpoints[0] != "10.0.0.1:8000" {
		t.Fatalf("routed to %s then %s, want 10.0.0.1:8000 twice", d1.Endpoints[0], d2.Endpoints[0])
	}
	if ex := d2.Explain(); !strings.Contains(ex, "presumed=4000") {
		t.Errorf("explain %q lacks presumed=4000", ex)
	}
	d3, err := p.Pick(context.Background(), Request{Tokens: other, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d3.Booking.Release()
	// 10.0.0.1's mean uncached prompt: 4,000, then 0 booked: 4,000 - 4,000/16 = 3,750;
	// one request in prefill: 25.15 ms + 3,750 x 0.198 ms = 0.768 s in full (0.817 s had
	// d2 been booked with its whole prompt). d1 left prefill at the instant it was booked
	// (the test's clock stands still), so 10.0.0.1's measured drain ratio is 0 and the
	// cap on its queue (decision 1738) charges d2 nothing.
	if ex := d3.Explain(); !strings.Contains(ex, "10.0.0.1:8000 matched=0 inflight=1") || !strings.Contains(ex, "queued=0.000 queued_full=0.768 drain=0.00") {
		t.Errorf("explain %q lacks 10.0.0.1's queued=0.000 queued_full=0.768 drain=0.00", ex)
	}
}

// With an index that shows nothing, ttftaware copies a hot family's prefix to an idle
// engine only for another request of the family: the picker hands it the prompt's token
// ids and records each route with them. The family's 2,000-token prompt went to
// 10.0.0.1 twice (the second a presumed hit), and HotTau later (the picker's offered
// rate measured) a 300-token prompt of another family is in prefill there; 10.0.0.2 is
// idle. A repeat of the family with its own last 200 tokens is copied to 10.0.0.2
// (reason replica); the next turn of the same prompt (it continues it) stays on
// 10.0.0.1, where its history is.
func TestTTFTAwareCopiesARepeatNotANextTurn(t *testing.T) {
	family := func(own uint32, n int) []uint32 {
		p := make([]uint32, n)
		for i := range p {
			p[i] = uint32(i + 1)
			if i >= 1800 {
				p[i] = own + uint32(i)
			}
		}
		return p
	}
	first := family(1<<20, 2000)
	for _, tc := range []struct {
		name       string
		prompt     []uint32
		want       string
		wantReason string
	}{
		{"a repeat of the family", family(2<<20, 2000), "10.0.0.2:8000", "replica"},
		{"the first prompt's next turn", append(append([]uint32{}, first...), family(3<<20, 2100)[1800:]...), "10.0.0.1:8000", "lowest-ttft"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:8000", "10.0.0.2:8000"), Policy: "ttftaware", Cache: mapCache{},
				Now: func() time.Time { return now }})
			for range 2 {
				d, err := p.Pick(context.Background(), Request{Tokens: first})
				if err != nil {
					t.Fatal(err)
				}
				if d.Endpoints[0] != "10.0.0.1:8000" {
					t.Fatalf("the family's prompt went to %s, want 10.0.0.1:8000", d.Endpoints[0])
				}
				d.Booking.Release()
			}
			// No copy is made before the picker's offered rate is measured (decision 1660).
			now = now.Add(scoring.HotTau)
			// Equal estimates go to the engine with the fewest tokens booked (decision 1695):
			// an unrelated longer prompt books more on 10.0.0.2 than the family did on
			// 10.0.0.1, so that the next unrelated prompt makes the family's holder busy.
			fd, err := p.Pick(context.Background(), Request{Tokens: filled(2500, 7)})
			if err != nil {
				t.Fatal(err)
			}
			fd.Booking.Release()
			if fd.Endpoints[0] != "10.0.0.2:8000" {
				t.Fatalf("the filler went to %s, want 10.0.0.2:8000 (fewer tokens booked there)", fd.Endpoints[0])
			}
			busy, err := p.Pick(context.Background(), Request{Tokens: filled(300, 9)})
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Booking.Release()
			if busy.Endpoints[0] != "10.0.0.1:8000" {
				t.Fatalf("the other prompt went to %s, want 10.0.0.1:8000", busy.Endpoints[0])
			}
			d, err := p.Pick(context.Background(), Request{Tokens: tc.prompt, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Booking.Release()
			if d.Endpoints[0] != tc.want || d.Ranked[0].Reason != tc.wantReason {
				t.Fatalf("routed to %s (%s), want %s (%s): %s", d.Endpoints[0], d.Ranked[0].Reason, tc.want, tc.wantReason, d.Explain())
			}
		})
	}
}

// filled is a prompt of n tokens, each v.
func filled(n int, v uint32) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = v
	}
	return p
}
