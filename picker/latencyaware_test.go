package picker

import (
	"context"
	"strings"
	"testing"
	"time"
)

// latencyaware sees what the fleet booked: the uncached tokens of the winner's prefill
// and the affinity of a cold prefix, and the explain header shows its terms.
func TestLatencyAwareBooksUncachedTokensAndExplainsItsTerms(t *testing.T) {
	f := newFleet("10.0.0.1:8000", "10.0.0.2:8000")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newPicker(t, Options{Fleet: f, Policy: "latencyaware", Now: func() time.Time { return now },
		Cache: mapCache{"10.0.0.1:8000": {Matched: 256, HolderRank: 0}, "10.0.0.2:8000": {Matched: 256, HolderRank: 1}}})
	tokens := make([]uint32, 300)
	d, err := p.Pick(context.Background(), Request{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Loads([]string{d.Endpoints[0]})[0].PrefillTokens; got != 300-256 {
		t.Errorf("winner has %d uncached tokens in prefill, want %d", got, 300-256)
	}
	ex := d.Explain()
	for _, want := range []string{"policy=latencyaware beta=1", "load=", "affinity="} {
		if !strings.Contains(ex, want) {
			t.Errorf("explain %q lacks %q", ex, want)
		}
	}
	first := d.Endpoints[0]
	d.Booking.Decoding()
	d.Booking.Release()
	// Same prefix again, the fleet idle: the cold prefix's affinity keeps it where it went.
	now = now.Add(5 * time.Second)
	d2, err := p.Pick(context.Background(), Request{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	d2.Booking.Release()
	if d2.Endpoints[0] != first || !strings.Contains(d2.Explain(), "affinity=0.3") {
		t.Errorf("second pick went to %s (%s), want %s with affinity=0.3", d2.Endpoints[0], d2.Explain(), first)
	}
}
