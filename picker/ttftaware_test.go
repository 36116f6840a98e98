package picker

import (
	"context"
	"strings"
	"testing"
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
	prompt, other := make([]uint32, 4000), make([]uint32, 4000)
	for i := range other {
		other[i] = 7
	}
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
	// one request in prefill: 25.15 ms + 3,750 x 0.198 ms = 0.768 s (0.817 s had d2 been
	// booked with its whole prompt).
	if ex := d3.Explain(); !strings.Contains(ex, "10.0.0.1:8000 matched=0 inflight=1") || !strings.Contains(ex, "queued=0.768") {
		t.Errorf("explain %q lacks 10.0.0.1's queued=0.768", ex)
	}
}
