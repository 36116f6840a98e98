package picker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/enginemetrics"
	"github.com/loadaware/loadaware-epp/scoring"
)

// ttftaware's picker times its own bookings to their first tokens: an endpoint that takes
// 1.3 times the model's time for each request's work reads slowdown 1.3 once it has seen
// a window of first tokens (1.00, unmeasured, before half a window), and the explain header shows the estimate scaled by it.
func TestTTFTAwareTimesItsBookings(t *testing.T) {
	now := time.Unix(0, 0)
	p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:8000"), Policy: "ttftaware", Cache: mapCache{},
		Now: func() time.Time { return now }})
	prompt := func(i int) []uint32 { // a prompt of its own: nothing presumed held
		tokens := make([]uint32, 400)
		for j := range tokens {
			tokens[j] = uint32(i + 1)
		}
		return tokens
	}
	pick := func(i int) Decision {
		t.Helper()
		d, err := p.Pick(context.Background(), Request{Tokens: prompt(i), Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := range enginemetrics.PrefillWindow {
		d := pick(i)
		if ex := d.Explain(); i < enginemetrics.PrefillWindow/2 && !strings.Contains(ex, "slowdown=1.00") {
			t.Fatalf("decision %d, before half a window: explain %q lacks slowdown=1.00", i, ex)
		}
		now = now.Add(time.Duration(1.3 * scoring.PrefillModel(scoring.Candidate{}, 400) * float64(time.Second)))
		d.Booking.Decoding()
		now = now.Add(time.Second) // decoding, then idle: not prefill time
		d.Booking.Release()
	}
	d := pick(-1)
	defer d.Booking.Release()
	if ex := d.Explain(); !strings.Contains(ex, "slowdown=1.30") {
		t.Fatalf("explain %q lacks slowdown=1.30", ex)
	}
}

// A booking released before its first token (a failed request) leaves the measure
// pending nothing: the next request's time is measured from its own sending, and the
// abandoned one's span is not counted in the overlap.
func TestPrefillTimesAbandoned(t *testing.T) {
	now := time.Unix(0, 0)
	pt := newPrefillTimes(func() time.Time { return now })
	e := pt.sent("a:1", 1)
	now = now.Add(time.Second)
	e.Released()
	e.Decoding() // after the release: nothing
	for range enginemetrics.PrefillWindow {
		e := pt.sent("a:1", 1)
		now = now.Add(2 * time.Second)
		e.Decoding()
		e.Released()
	}
	booked, overlap := pt.read("a:1")
	if booked < 2 || booked > 2.02 {
		t.Fatalf("booked slowdown %v, want 2 and the abandoned second weighed once (about 2.01)", booked)
	}
	if overlap < 1 || overlap > 1.01 {
		t.Fatalf("overlap %v, want about 1 (one request at a time)", overlap)
	}
	pt.forget([]string{"b:1"})
	if booked, overlap := pt.read("a:1"); booked != 0 || overlap != 0 {
		t.Fatalf("a forgotten endpoint reads %v, %v; want 0, 0 (not measured)", booked, overlap)
	}
}

// Two requests at a time, each sent together and heard together, read an overlap of 2,
// whichever pooled entries carry them.
func TestPrefillTimesOverlap(t *testing.T) {
	now := time.Unix(0, 0)
	pt := newPrefillTimes(func() time.Time { return now })
	for range enginemetrics.PrefillWindow {
		a, b := pt.sent("a:1", 0.5), pt.sent("a:1", 0.5)
		now = now.Add(time.Second)
		a.Decoding()
		b.Decoding()
		a.Released()
		b.Released()
		now = now.Add(time.Second) // idle
	}
	if _, overlap := pt.read("a:1"); overlap < 1.98 || overlap > 2.02 {
		t.Fatalf("overlap %v, want 2", overlap)
	}
}
