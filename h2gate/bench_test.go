package h2gate

import (
	"net"
	"testing"
)

// BenchmarkRead is the gate's cost on a connection carrying 1 MiB messages (in 16 KiB DATA
// frames, gRPC's frame size) on 8 streams, read 32 KiB at a time as grpc-go's reader does,
// against the same reads without the gate. Its bytes/s are the gate's throughput.
func BenchmarkRead(b *testing.B) {
	w := newWire()
	const streams, msgLen, frame = 8, 1 << 20, 16 << 10
	for id := uint32(1); id < 2*streams; id += 2 {
		w.headers(id, false)
	}
	m := msg(msgLen, fill(msgLen))
	for off := 0; off < len(m); off += frame {
		for id := uint32(1); id < 2*streams; id += 2 {
			w.data(id, false, m[off:min(off+frame, len(m))])
		}
	}
	src := w.buf.Bytes()
	for _, gated := range []bool{false, true} {
		name := "raw"
		if gated {
			name = "gated"
		}
		b.Run(name, func(b *testing.B) {
			p := make([]byte, 32<<10)
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				var bud budget
				bud.max.Store(1 << 40)
				raw := &chunkConn{src: src, sizes: []int{len(p)}}
				var c net.Conn = raw
				if gated {
					c = New(bud.config(64<<10, 4<<20)).wrap(raw)
				}
				for {
					if _, err := c.Read(p); err != nil {
						break
					}
				}
			}
		})
	}
}

// BenchmarkStream is the gate's cost per stream on a connection serving them one after
// another, as an ext_proc connection does: each stream's headers and an 8 KiB message (over
// the threshold, so taken and given back) read, and its trailers written.
func BenchmarkStream(b *testing.B) {
	const streams = 4096
	src, sizes, ends := streamsWire(streams, 8<<10)
	var bud budget
	bud.max.Store(1 << 40)
	g := New(bud.config(64<<10>>4, 4<<20))
	p := make([]byte, 32<<10)
	var c net.Conn
	i := streams
	b.ReportAllocs()
	for b.Loop() {
		if i == streams {
			c, i = g.wrap(&discardConn{chunkConn{src: src, sizes: sizes}}), 0
		}
		if _, err := c.Read(p); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(ends[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
