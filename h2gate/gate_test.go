package h2gate

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/peer"
)

// budget is a test byte budget.
type budget struct {
	max, used        atomic.Int64
	refused, closedN atomic.Int64
}

func (b *budget) config(threshold, maxMessage int64) Config {
	return Config{
		Take: func(n int64) bool {
			if b.used.Add(n) > b.max.Load() {
				b.used.Add(-n)
				return false
			}
			return true
		},
		Give: func(n int64) { b.used.Add(-n) },
		Refused: func(closed bool) {
			b.refused.Add(1)
			if closed {
				b.closedN.Add(1)
			}
		},
		Threshold: threshold, MaxMessage: maxMessage,
	}
}

// chunkConn is a net.Conn whose Reads return src in pieces of the given sizes (the last
// repeated), and whose Writes are kept.
type chunkConn struct {
	src    []byte
	sizes  []int
	wrote  bytes.Buffer
	closed bool
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.src), c.sizes[0])
	if len(c.sizes) > 1 {
		c.sizes = c.sizes[1:]
	}
	copy(p, c.src[:n])
	c.src = c.src[n:]
	return n, nil
}

func (c *chunkConn) Write(p []byte) (int, error)      { return c.wrote.Write(p) }
func (c *chunkConn) Close() error                     { c.closed = true; return nil }
func (c *chunkConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *chunkConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2} }
func (c *chunkConn) SetDeadline(time.Time) error      { return nil }
func (c *chunkConn) SetReadDeadline(time.Time) error  { return nil }
func (c *chunkConn) SetWriteDeadline(time.Time) error { return nil }

// wire builds a client's byte stream: the preface and the frames that add writes.
type wire struct {
	buf bytes.Buffer
	fr  *http2.Framer
}

func newWire() *wire {
	w := &wire{}
	w.buf.WriteString(http2.ClientPreface)
	w.fr = http2.NewFramer(&w.buf, nil)
	return w
}

func (w *wire) headers(id uint32, end bool) *wire {
	_ = w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x83}, EndHeaders: true, EndStream: end})
	return w
}

func (w *wire) data(id uint32, end bool, b []byte) *wire {
	_ = w.fr.WriteData(id, end, b)
	return w
}

func (w *wire) padded(id uint32, b []byte, pad int) *wire {
	_ = w.fr.WriteDataPadded(id, false, b, make([]byte, pad))
	return w
}

func (w *wire) rst(id uint32) *wire {
	_ = w.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	return w
}

// msg is a gRPC message: its prefix announcing n bytes, then body (which may be shorter).
func msg(n int, body []byte) []byte {
	b := make([]byte, grpcPrefixLen, grpcPrefixLen+len(body))
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	return append(b, body...)
}

func fill(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }

// readAll reads everything through c, reporting what grpc-go would have seen and the error
// that ended it (nil at EOF).
func readAll(c net.Conn) ([]byte, error) {
	var out bytes.Buffer
	p := make([]byte, 4096)
	for {
		n, err := c.Read(p)
		out.Write(p[:n])
		if errors.Is(err, io.EOF) {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
}

// trailers is what the server writes to end stream id: a HEADERS frame with END_STREAM.
func trailers(id uint32) []byte {
	var b bytes.Buffer
	_ = http2.NewFramer(&b, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x88}, EndHeaders: true, EndStream: true})
	return b.Bytes()
}

func TestGate(t *testing.T) {
	const threshold, maxMessage = 100, 10_000
	big := msg(1000, fill(1000))
	cases := []struct {
		name     string
		budget   int64
		over     int64 // the overdraft
		wire     *wire
		sizes    []int        // read sizes
		write    []byte       // what the server then writes
		receive  []int        // Received after the reads, in order
		close    bool         // close the connection at the end
		wantErr  bool         // Read fails (the connection refused)
		used     int64        // taken at the end
		overUsed int64        // taken on the overdraft at the end
		refused  int64        // messages refused
		rewrote  bool         // the output differs from the input at the big message's length
		check    func([]byte) // on the bytes grpc-go would see
	}{
		{name: "a short message passes untaken", budget: 0,
			wire: newWire().headers(1, false).data(1, false, msg(50, fill(50))), sizes: []int{7}},
		{name: "a long message is taken until received", budget: 1000,
			wire: newWire().headers(1, false).data(1, false, big), sizes: []int{333}, used: 1000},
		{name: "received gives it back", budget: 1000,
			wire: newWire().headers(1, false).data(1, false, big), sizes: []int{333}, receive: []int{1000}},
		{name: "received of another length gives nothing back", budget: 1000,
			wire: newWire().headers(1, false).data(1, false, big), sizes: []int{4096}, receive: []int{999, 50}, used: 1000},
		{name: "received before the last byte gives nothing back", budget: 1000,
			wire: newWire().headers(1, false).data(1, false, big[:600]), sizes: []int{4096}, receive: []int{1000}, used: 1000},
		{name: "two streams and two messages each", budget: 4000,
			wire: newWire().headers(1, false).headers(3, false).data(1, false, big).data(3, false, msg(2000, fill(700))).
				data(3, false, fill(1300)).data(1, false, msg(1000, fill(1000))),
			sizes: []int{1}, receive: []int{1000, 2000}, used: 1000},
		{name: "over the budget the length is rewritten", budget: 999,
			wire: newWire().headers(1, false).data(1, false, big).data(1, false, msg(200, fill(200))), sizes: []int{4096},
			refused: 1, rewrote: true},
		{name: "over the budget, the prefix in two frames of one read", budget: 999,
			wire: newWire().headers(1, false).data(1, false, big[:3]).data(1, false, big[3:]), sizes: []int{4096},
			refused: 1, check: func(b []byte) {
				if !bytes.Contains(b, []byte{0xff, 0xff}) || bytes.Contains(b, []byte{0x03, 0xe8}) {
					t.Errorf("the length was not rewritten across the frames")
				}
			}},
		{name: "over the budget, the length split across reads closes the connection", budget: 999,
			wire: newWire().headers(1, false).data(1, false, big), sizes: []int{24 + 9 + 1 + 9 + 3, 4096},
			wantErr: true, refused: 1},
		{name: "split across reads, on the overdraft until received", budget: 999, over: 1000,
			wire: newWire().headers(1, false).data(1, false, big), sizes: []int{24 + 9 + 1 + 9 + 3, 4096}, overUsed: 1000},
		{name: "split across reads, the overdraft given back when received", budget: 999, over: 1000,
			wire: newWire().headers(1, false).data(1, false, big), sizes: []int{24 + 9 + 1 + 9 + 3, 4096}, receive: []int{1000}},
		{name: "split across reads, the overdraft given back when the stream ends", budget: 999, over: 1000,
			wire: newWire().headers(1, false).data(1, false, big[:600]).rst(1), sizes: []int{24 + 9 + 1 + 9 + 3, 4096}},
		{name: "split across reads, the overdraft too small closes the connection", budget: 999, over: 999,
			wire: newWire().headers(1, false).data(1, false, big), sizes: []int{24 + 9 + 1 + 9 + 3, 4096},
			wantErr: true, refused: 1},
		{name: "the flag byte alone in an earlier read still rewrites", budget: 999,
			wire: newWire().headers(1, false).data(1, false, big), sizes: []int{24 + 9 + 1 + 9 + 1, 4096},
			refused: 1, rewrote: true},
		{name: "longer than gRPC's limit passes untaken", budget: 0,
			wire: newWire().headers(1, false).data(1, false, msg(maxMessage+1, fill(50))), sizes: []int{4096}},
		{name: "padded frames: the padding is not message bytes", budget: 1500,
			wire: newWire().headers(1, false).padded(1, big[:2], 7).padded(1, big[2:500], 200).padded(1, big[500:], 3).
				data(1, false, msg(500, fill(500))), sizes: []int{5}, receive: []int{1000}, used: 500},
		{name: "the client ends the stream mid-message", budget: 1000,
			wire: newWire().headers(1, false).data(1, true, big[:500]), sizes: []int{4096}},
		{name: "the client resets the stream", budget: 2000,
			wire: newWire().headers(1, false).data(1, false, big).data(1, false, big[:10]).rst(1), sizes: []int{4096}},
		{name: "the server's trailers end the stream", budget: 2000,
			wire: newWire().headers(1, false).data(1, false, big).data(1, false, big[:10]), sizes: []int{4096},
			write: trailers(1)},
		{name: "trailers of another stream", budget: 2000,
			wire: newWire().headers(1, false).data(1, false, big), sizes: []int{4096}, write: trailers(3), used: 1000},
		{name: "closing the connection gives everything back", budget: 3000,
			wire:  newWire().headers(1, false).headers(3, false).data(1, false, big).data(3, false, big[:7]),
			sizes: []int{4096}, close: true},
		{name: "data of a stream not opened is not followed", budget: 0,
			wire: newWire().data(5, false, big), sizes: []int{4096}},
		{name: "a stream after an ended one starts afresh", budget: 1000,
			wire:  newWire().headers(1, false).data(1, false, big[:600]).rst(1).headers(3, false).data(3, false, big),
			sizes: []int{4096}, used: 1000},
		{name: "a stream after a refused one starts afresh", budget: 1000,
			wire:  newWire().headers(1, false).data(1, false, msg(maxMessage+1, fill(50))).rst(1).headers(3, false).data(3, false, big),
			sizes: []int{4096}, used: 1000},
		{name: "an ended stream's later data is not followed", budget: 1000,
			wire: newWire().headers(1, false).rst(1).headers(1, false).data(1, false, big), sizes: []int{4096}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b budget
			b.max.Store(tc.budget)
			cfg := b.config(threshold, maxMessage)
			cfg.Overdraft = tc.over
			g := New(cfg)
			in := bytes.Clone(tc.wire.buf.Bytes())
			raw := &chunkConn{src: in, sizes: tc.sizes}
			c := g.wrap(raw)
			got, err := readAll(c)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Read error %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && !raw.closed {
				t.Errorf("the refused connection was not closed")
			}
			if len(tc.write) > 0 {
				if _, err := c.Write(tc.write); err != nil || !bytes.Equal(raw.wrote.Bytes(), tc.write) {
					t.Fatalf("Write passed %x (%v), want %x", raw.wrote.Bytes(), err, tc.write)
				}
			}
			ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: c.RemoteAddr()})
			for _, n := range tc.receive {
				g.Received(ctx, n)
			}
			if tc.close {
				_ = c.Close()
			}
			if u := b.used.Load(); u != tc.used {
				t.Errorf("taken at the end %d, want %d", u, tc.used)
			}
			if o := g.over.Load(); o != tc.overUsed {
				t.Errorf("on the overdraft at the end %d, want %d", o, tc.overUsed)
			}
			if r := b.refused.Load(); r != tc.refused {
				t.Errorf("refused %d messages, want %d", r, tc.refused)
			}
			if !tc.wantErr {
				want := tc.wire.buf.Bytes()
				if tc.rewrote {
					i := bytes.Index(want, big[:grpcPrefixLen])
					want = bytes.Clone(want)
					copy(want[i+1:], []byte{0xff, 0xff, 0xff, 0xff})
				}
				if tc.check != nil {
					tc.check(got)
				} else if !bytes.Equal(got, want) {
					t.Errorf("grpc-go would see %d bytes differing from the %d expected", len(got), len(want))
				}
			}
			if c.RemoteAddr().String() != raw.RemoteAddr().String() {
				t.Errorf("RemoteAddr %s, want the connection's %s", c.RemoteAddr(), raw.RemoteAddr())
			}
		})
	}
}

// TestReceivedWithoutAGatedPeer: a context without a peer, or with another connection's
// address, gives nothing back and does not fail.
func TestReceivedWithoutAGatedPeer(t *testing.T) {
	var b budget
	b.max.Store(1000)
	g := New(b.config(100, 10_000))
	c := g.wrap(&chunkConn{src: newWire().headers(1, false).data(1, false, msg(1000, fill(1000))).buf.Bytes(), sizes: []int{4096}})
	if _, err := readAll(c); err != nil {
		t.Fatal(err)
	}
	g.Received(context.Background(), 1000)
	g.Received(peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{}}), 1000)
	if u := b.used.Load(); u != 1000 {
		t.Errorf("taken %d, want 1000 still held", u)
	}
}

// FuzzScan: any bytes in any read sizes, and any server writes, leave the budget and the
// overdraft balanced once the connection closes, and never take more than either.
func FuzzScan(f *testing.F) {
	f.Add(newWire().headers(1, false).padded(1, msg(300, fill(120)), 9).data(1, true, fill(180)).buf.Bytes(), uint8(7), trailers(1))
	f.Add(newWire().headers(1, false).headers(3, false).data(3, false, msg(5000, nil)).rst(3).buf.Bytes(), uint8(1), []byte{})
	f.Fuzz(func(t *testing.T, in []byte, size uint8, out []byte) {
		var b budget
		b.max.Store(4000)
		cfg := b.config(100, 1<<20)
		cfg.Overdraft = 3000
		g := New(cfg)
		c := g.wrap(&chunkConn{src: in, sizes: []int{int(size%64) + 1}})
		_, _ = readAll(c)
		_, _ = c.Write(out)
		if u, o := b.used.Load(), g.over.Load(); u < 0 || u > 4000 || o < 0 || o > 3000 {
			t.Fatalf("taken %d and %d on the overdraft, outside [0, 4000] and [0, 3000]", u, o)
		}
		_ = c.Close()
		if u, o := b.used.Load(), g.over.Load(); u != 0 || o != 0 {
			t.Fatalf("taken %d and %d on the overdraft after close, want 0", u, o)
		}
	})
}

// discardConn is a chunkConn whose Writes are dropped, so that writing allocates nothing.
type discardConn struct{ chunkConn }

func (c *discardConn) Write(p []byte) (int, error) { return len(p), nil }

// streamsWire is a client's bytes for n streams one after another, each its headers and
// one message of msgLen bytes in one DATA frame: the bytes, each stream's length (the first
// with the preface) and the trailers that end each.
func streamsWire(n, msgLen int) (src []byte, sizes []int, ends [][]byte) {
	m := msg(msgLen, fill(msgLen))
	for i := range n {
		id := uint32(2*i + 1)
		w := newWire()
		if i > 0 {
			w.buf.Reset() // the preface comes once, before the first stream
		}
		w.headers(id, false).data(id, false, m)
		src = append(src, w.buf.Bytes()...)
		sizes = append(sizes, w.buf.Len())
		ends = append(ends, trailers(id))
	}
	return src, sizes, ends
}

// TestStreamsAllocateNothing: once a connection has served a stream, each further stream
// (its headers and a long message read, its trailers written) allocates nothing in the gate.
func TestStreamsAllocateNothing(t *testing.T) {
	const streams = 200
	var b budget
	b.max.Store(1 << 20)
	g := New(b.config(100, 10_000))
	src, sizes, ends := streamsWire(streams, 1000)
	c := g.wrap(&discardConn{chunkConn{src: src, sizes: sizes}})
	p := make([]byte, 4096)
	i := 0
	allocs := testing.AllocsPerRun(streams-1, func() {
		if _, err := c.Read(p); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(ends[i]); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per stream, want 0", allocs)
	}
	if u := b.used.Load(); u != 0 {
		t.Errorf("taken %d after every stream ended, want 0", u)
	}
}
