package picker

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkPickPolicy compares one decision of latencyaware with loadaware's on the same
// fleet (BenchmarkPickLMCache's: 1,578 token ids, the real LMCache index, 2 holders) at 2
// and 256 endpoints; each decision's first token arrives and it is released, so the
// endpoints' paces are measured, as in a running fleet.
func BenchmarkPickPolicy(b *testing.B) {
	for _, n := range []int{2, 256} {
		for _, policy := range []string{"loadaware", "latencyaware"} {
			b.Run(fmt.Sprintf("endpoints=%d/policy=%s", n, policy), func(b *testing.B) {
				bf := newBenchFleet(b, n, 2)
				now := benchNow
				bf.fleet.SetClock(func() time.Time { return now })
				p := newPicker(b, Options{Fleet: bf.fleet, Policy: policy, Cache: LMCacheView{Index: bf.index}, Now: func() time.Time { return now }})
				req := Request{Tokens: bf.tokens}
				lat := make([]time.Duration, 0, 1<<16)
				cpu := make([]time.Duration, 0, 1<<16)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				runtime.GC()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					now = now.Add(time.Millisecond)
					c0, cpuOK := threadCPU()
					t := time.Now()
					d, err := p.Pick(context.Background(), req)
					lat = append(lat, time.Since(t))
					if c1, _ := threadCPU(); cpuOK {
						cpu = append(cpu, c1-c0)
					}
					if err != nil {
						b.Fatal(err)
					}
					d.Booking.Decoding()
					d.Booking.Release()
				}
				reportQuantiles(b, lat, "")
				if len(cpu) > 0 {
					reportQuantiles(b, cpu, "-cpu")
				}
			})
		}
	}
}
