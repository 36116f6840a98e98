package zmtp

import (
	"bytes"
	"io"
	"testing"
)

// BenchmarkForward is the front's CPU per batch without the sockets: a stream of LMCache
// batches (frames of 60 bytes, as a worker's admits) read from memory and written to
// io.Discard; "dropped" sends batches over the byte bound, charged and discarded; "large"
// sends kept messages over the small buffer back to back (of one frame, read past the read
// buffer, and of many).
func BenchmarkForward(b *testing.B) {
	lim := Limits{FrameBytes: 256 << 10, MessageBytes: 256 << 10, MessageFrames: 64}
	for _, c := range []struct {
		name         string
		frames, size int
	}{
		{"frames=7", 7, 60},
		{"frames=50", 50, 60},
		{"dropped", 2, 200 << 10},
		{"large=1x200KiB", 1, 200 << 10},
		{"large=60x4KiB", 60, 4 << 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			batch := msg(many(c.frames, c.size)...)
			const perRun = 100
			in := cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH"), bytes.Repeat(batch, perRun))
			var charged int64
			drops := Drops{Charge: func(n int64) error { charged += n; return nil }}
			b.ReportAllocs()
			for b.Loop() {
				if err := Forward(bytes.NewReader(in), io.Discard, testProps, lim, drops); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perRun), "ns/batch")
			if c.name == "dropped" && charged == 0 {
				b.Fatal("nothing charged")
			}
		})
	}
}
