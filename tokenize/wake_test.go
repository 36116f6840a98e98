package tokenize

import (
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWakeBesideLargeEncoding measures what a worst-shape encoding costs the rest of a
// two-processor process when the other processor is busy too (the soak's five hostile
// clients, decision 1182): one goroutine encodes 256 KiB of whitespace in a loop, one spins,
// and a probe measures how late it runs after a timer (sleep) or after a loopback round
// trip (tcp). Reported: the probe's delay p50 and p99 in µs.
func BenchmarkWakeBesideLargeEncoding(b *testing.B) {
	tk := loadRef(b, "qwen2_5")
	prompt := strings.Repeat(" ", 256<<10)
	for _, probe := range []string{"sleep", "tcp"} {
		b.Run(probe, func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
			var stop atomic.Bool
			var busy sync.WaitGroup
			busy.Go(func() {
				for !stop.Load() {
					tk.Encode(prompt, false)
				}
			})
			busy.Go(func() {
				x := uint64(1)
				for !stop.Load() {
					for range 1 << 12 {
						x = x*6364136223846793005 + 1442695040888963407
					}
				}
				_ = x
			})
			defer busy.Wait()
			defer stop.Store(true)
			rt := probeFunc(b, probe)
			var lat []float64
			for b.Loop() {
				lat = append(lat, float64(rt())/1e3)
			}
			slices.Sort(lat)
			b.ReportMetric(lat[len(lat)/2], "p50-µs")
			b.ReportMetric(lat[len(lat)*99/100], "p99-µs")
		})
	}
}

// probeFunc returns one probe of kind: its delay (a 1 ms sleep's overshoot, or a 1-byte
// loopback round trip through an echoing goroutine).
func probeFunc(b *testing.B, kind string) func() time.Duration {
	if kind == "sleep" {
		return func() time.Duration {
			start := time.Now()
			time.Sleep(time.Millisecond)
			return time.Since(start) - time.Millisecond
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 1)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	buf := make([]byte, 1)
	return func() time.Duration {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
}
