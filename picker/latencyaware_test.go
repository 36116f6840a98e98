package picker

import (
	"context"
	"strings"
	"testing"
	"time"
)

// latencyaware sees what the fleet measured (the winner's decode pace) and the affinity
// of a cold prefix, and the explain header shows its terms.
func TestLatencyAwareUsesPaceAndAffinityAndExplainsItsTerms(t *testing.T) {
	f := newFleet("10.0.0.1:8000", "10.0.0.2:8000")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.SetClock(func() time.Time { return now })
	p := newPicker(t, Options{Fleet: f, Policy: "latencyaware", Now: func() time.Time { return now },
		Cache: mapCache{"10.0.0.1:8000": {Matched: 256, HolderRank: 0}, "10.0.0.2:8000": {Matched: 256, HolderRank: 1}}})
	tokens := make([]uint32, 300)
	d, err := p.Pick(context.Background(), Request{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	ex := d.Explain()
	for _, want := range []string{"policy=latencyaware beta=1", "load=", "affinity="} {
		if !strings.Contains(ex, want) {
			t.Errorf("explain %q lacks %q", ex, want)
		}
	}
	first := d.Endpoints[0]
	d.Booking.Decoding()
	now = now.Add(2 * time.Second)
	d.Booking.Release()
	if got := f.Loads([]string{first})[0].DecodePace; got != 2*time.Second {
		t.Errorf("winner's decode pace %v, want the 2 s its request decoded", got)
	}
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
