package picker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
)

// bridge hands one fleet's bookings to another replica's picker, as package replica does
// over NATS.
type bridge struct{ to *Picker }

func (b bridge) Booked(addr string, tag uint64) { b.to.PeerBooked(addr, tag) }
func (bridge) Decoding(string)                  {}
func (bridge) Released(string, bool)            {}

var _ fleet.Listener = bridge{}

// A peer's bookings enter the routing history: with them, a second replica's cold
// decision follows the first replica's (the QPS fallback counts the peer's request;
// latencyaware's affinity follows the prefix's last route); without them it makes the
// decision a picker with no history makes.
func TestPeerBookingsEnterTheRoutingHistory(t *testing.T) {
	const a1, a2 = "10.0.0.1:8000", "10.0.0.2:8000"
	tests := []struct {
		policy  string
		shared  bool
		want    string
		explain string
	}{
		{"loadaware", true, a2, "reason=qps-fallback"}, // a1 has had a request, a2 none
		{"loadaware", false, a1, "reason=qps-fallback"},
		{"kvaware", true, a2, "reason=qps-fallback"},
		{"kvaware", false, a1, "reason=qps-fallback"},
		{"latencyaware", true, a2, "affinity=0.3"}, // the prefix went to a2 on the peer
		{"latencyaware", false, a1, "affinity=0"},
	}
	for _, tc := range tests {
		name := tc.policy + map[bool]string{true: "/shared", false: "/alone"}[tc.shared]
		t.Run(name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			fa, fb := newFleet(a1, a2), newFleet(a1, a2)
			pa := newPicker(t, Options{Fleet: fa, Policy: tc.policy, Now: clock, Cache: mapCache{}})
			pb := newPicker(t, Options{Fleet: fb, Policy: tc.policy, Now: clock, Cache: mapCache{}})
			if tc.shared {
				fa.SetListener(bridge{to: pb})
			}
			if tc.policy == "latencyaware" {
				// Load a1 on the first replica, so that its route (a2) is not the one an
				// idle picker makes.
				busy, err := fa.Book(a1)
				if err != nil {
					t.Fatal(err)
				}
				defer busy.Release()
			}
			tokens := make([]uint32, 300)
			d, err := pa.Pick(context.Background(), Request{Tokens: tokens})
			if err != nil {
				t.Fatal(err)
			}
			d.Booking.Release()
			if first := map[bool]string{true: a2, false: a1}[tc.policy == "latencyaware"]; d.Endpoints[0] != first {
				t.Fatalf("precondition: the first replica chose %s (%s), want %s", d.Endpoints[0], d.Explain(), first)
			}
			now = now.Add(time.Second)
			d2, err := pb.Pick(context.Background(), Request{Tokens: tokens})
			if err != nil {
				t.Fatal(err)
			}
			d2.Booking.Release()
			if d2.Endpoints[0] != tc.want || !strings.Contains(d2.Explain(), tc.explain) {
				t.Errorf("second replica chose %s (%s), want %s with %q", d2.Endpoints[0], d2.Explain(), tc.want, tc.explain)
			}
		})
	}
}
