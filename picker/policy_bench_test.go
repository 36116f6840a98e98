package picker

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkPickPolicy compares one decision of latencyaware and ttftaware with loadaware's on the same
// fleet (BenchmarkPickLMCache's: 1,578 token ids, the real LMCache index, 2 holders) at 2
// and 256 endpoints; each decision's first token arrives and it is released, so the
// endpoints' paces are measured, as in a running fleet.
func BenchmarkPickPolicy(b *testing.B) {
	for _, n := range []int{2, 256} {
		for _, policy := range []string{"loadaware", "latencyaware", "ttftaware"} {
			b.Run(fmt.Sprintf("endpoints=%d/policy=%s", n, policy), func(b *testing.B) {
				bf := newBenchFleet(b, n, 2)
				now := benchNow
				bf.fleet.SetClock(func() time.Time { return now })
				p := newPicker(b, Options{Fleet: bf.fleet, Policy: policy, Cache: LMCacheView{Index: bf.index}, Now: func() time.Time { return now }})
				req := Request{Tokens: bf.tokens}
				timeEach(b, func() func() {
					now = now.Add(time.Millisecond)
					d, err := p.Pick(context.Background(), req)
					if err != nil {
						b.Fatal(err)
					}
					return func() {
						d.Booking.Decoding()
						d.Booking.Release()
					}
				})
			})
		}
	}
}
