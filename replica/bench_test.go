package replica

import (
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
)

// BenchmarkBooking measures one request's bookings (book, first token, release): what a
// picker decision and its stream add to the fleet, alone and as a replica publishing its
// deltas to a peer over a real in-process NATS server. The difference is the shared
// state's cost on the decision path (Booked runs under the picker's decision lock).
func BenchmarkBooking(b *testing.B) {
	ep := endpoints[0]
	run := func(b *testing.B, f *fleet.Set) {
		b.ReportAllocs()
		for b.Loop() {
			bk, err := f.Book(ep)
			if err != nil {
				b.Fatal(err)
			}
			bk.Decoding()
			bk.Release()
		}
	}
	b.Run("lone", func(b *testing.B) {
		f := fleet.New()
		f.Update(endpoints)
		run(b, f)
	})
	b.Run("replica", func(b *testing.B) {
		url := startNATS(b)
		tune := func(c *Config) { c.StateInterval, c.PeerTimeout = time.Second, 5*time.Second }
		a, peer := startNode(b, url, tune), startNode(b, url, tune)
		a.awaitReady(b)
		peer.awaitReady(b)
		run(b, a.fleet)
	})
}
