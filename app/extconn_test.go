package app

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A Read waiting on either limit returns as soon as the connection is closed.
func TestExtConnCloseEndsAWait(t *testing.T) {
	conns, read, stream := bothLimits(t, 1<<10, 1<<10, 1<<10, 1, 1)
	for _, tc := range []struct {
		name    string
		conn    func(t *testing.T, server net.Conn) *extConn
		waiting prometheus.Counter // above 0 once the Read waits
	}{
		{"read rate: 60 KiB past the burst owes a minute", func(_ *testing.T, server net.Conn) *extConn {
			return &extConn{Conn: server, conns: conns, read: read, bytes: holding(1<<10, 1<<10, -61<<10), closed: make(chan struct{})}
		}, read.slowed},
		{"stream rate: a stream a minute, one refused", func(t *testing.T, server net.Conn) *extConn {
			c := &extConn{Conn: server, conns: conns, stream: stream, streams: newStreamBucket(1.0/60, 1, time.Now()), closed: make(chan struct{})}
			if !c.admit() || c.admit() {
				t.Fatal("the bucket did not admit one stream and refuse the next")
			}
			return c
		}, stream.waited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := net.Pipe()
			defer client.Close()
			go func() { _, _ = client.Write(make([]byte, 64<<10)) }()
			c := tc.conn(t, server)
			ended := make(chan struct{})
			go func() {
				_, _ = c.Read(make([]byte, 4<<10))
				close(ended)
			}()
			for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(tc.waiting) == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) { // until the Read is waiting
					t.Fatal("the Read never waited")
				}
			}
			c.Close()
			select {
			case <-ended:
			case <-time.After(10 * time.Second): // a sixth of the wait: only Close can end it this soon
				t.Fatal("a waiting Read did not return within 10s of Close (it waited a minute)")
			}
		})
	}
}

// extListener files each accepted connection once, with the limits that are on, where a
// stream's peer address finds it, and Close removes it; after a refused stream a Read
// waits, and a Read draws what it read from the bucket of read bytes.
func TestExtListenerFilesConnections(t *testing.T) {
	// 10 streams a second: a refusal costs a 100 ms wait, and the two admits below would have
	// to be 100 ms apart (not 1 ms, a loaded host under -race) for the second to find a token.
	conns, read, stream := bothLimits(t, 1<<20, 1<<20, 1<<20, 10, 1)
	for _, tc := range []struct {
		name   string
		read   *connRate
		stream *streamRate
	}{
		{"both", read, stream},
		{"read rate only", read, nil},
		{"stream rate only", nil, stream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := &extListener{Listener: inner, conns: conns, read: tc.read, stream: tc.stream}
			defer l.Close()
			client, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			nc, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			c := conns.byAddr(client.LocalAddr())
			if c == nil || net.Conn(c) != nc {
				t.Fatalf("the accepted connection is not filed under its peer address %v", client.LocalAddr())
			}
			if c.read != tc.read || c.stream != tc.stream {
				t.Fatalf("filed with read %p, stream %p; want %p, %p", c.read, c.stream, tc.read, tc.stream)
			}
			if tc.stream != nil && (!c.admit() || c.admit()) {
				t.Fatal("a burst of one did not admit one stream and refuse the next")
			}
			if _, err := client.Write(make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
			waited := testutil.ToFloat64(stream.waited)
			n, err := nc.Read(make([]byte, 100))
			if err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(stream.waited) - waited; (got > 0) != (tc.stream != nil) {
				t.Fatalf("the Read after a refusal waited %vs, want a wait only with the stream rate on", got)
			}
			if tc.read != nil {
				c.mu.Lock()
				left := c.bytes.Tokens()
				c.mu.Unlock()
				if left != 1<<20-float64(n) { // full at Accept, so no refill before the Take
					t.Fatalf("after reading %d bytes the bucket holds %v of %v", n, left, 1<<20)
				}
			}
			nc.Close()
			if got := conns.byAddr(client.LocalAddr()); got != nil {
				t.Fatal("a closed connection is still filed")
			}
		})
	}
}

// BenchmarkExtConnRead is what the limits add to each Read of an ext_proc connection with
// both on, at rates it never reaches: a Read of 16 KiB from a connection that returns at
// once.
func BenchmarkExtConnRead(b *testing.B) {
	conns, read, stream := bothLimits(b, 1<<50, 1<<50, 8<<20, 1<<30, 1<<30)
	l := &extListener{Listener: &oneConn{conn: instantConn{}}, conns: conns, read: read, stream: stream}
	c, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// oneConn is a listener that accepts conn.
type oneConn struct {
	net.Listener
	conn net.Conn
}

func (l *oneConn) Accept() (net.Conn, error) { return l.conn, nil }

// instantConn is a connection whose Read fills the buffer at once.
type instantConn struct{ net.Conn }

func (instantConn) Read(p []byte) (int, error) { return len(p), nil }
func (instantConn) RemoteAddr() net.Addr       { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// bothLimits returns a registry and a read rate and a stream rate filing their connections
// in it.
func bothLimits(tb testing.TB, readRate, readBurst, maxBody, streams, streamBurst int64) (*extConns, *connRate, *streamRate) {
	tb.Helper()
	conns := newExtConns()
	read, err := newConnRate(readRate, readBurst, maxBody, conns, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	stream, err := newStreamRate(streams, streamBurst, conns, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	return conns, read, stream
}

// Finding a stream's connection, which streamRate.tap does for every new stream, allocates
// nothing for a TCP peer and finds only the connection filed under that address.
func TestExtConnsByAddrAllocatesNothing(t *testing.T) {
	conns := newExtConns()
	filed := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	c := &extConn{key: keyOf(filed)}
	conns.open[c.key] = c
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000} // another value, the same address
	if got := conns.byAddr(peer); got != c {
		t.Fatalf("byAddr(%v) = %p, want the connection filed under it %p", peer, got, c)
	}
	if got := conns.byAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40001}); got != nil {
		t.Fatalf("byAddr of another port found %p", got)
	}
	var wrapped net.Addr = wrappedAddr{peer} // as h2gate hands gRPC a gated connection's address
	if got := conns.byAddr(wrapped); got != c {
		t.Fatalf("byAddr(a wrapped %v) = %p, want the connection filed under the address it wraps %p", peer, got, c)
	}
	for _, a := range []net.Addr{peer, wrapped} {
		if n := testing.AllocsPerRun(100, func() { _ = conns.byAddr(a) }); n != 0 {
			t.Fatalf("byAddr(%T) allocates %v times a lookup, want 0", a, n)
		}
	}
}

// wrappedAddr is an address wrapping another, as h2gate's does.
type wrappedAddr struct{ net.Addr }

func (a wrappedAddr) Unwrap() net.Addr { return a.Addr }
