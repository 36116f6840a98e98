package grpcbuf

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// encoded is an Encoder that is also a proto.Message (a BytesValue): it sends wire, which
// need not be the message's encoding, so a test sees which of the two the codec sent; extra
// bytes are appended beyond what EncodedSize announces.
type encoded struct {
	*wrapperspb.BytesValue
	wire  []byte
	extra int
}

func (e *encoded) EncodedSize() int { return len(e.wire) }
func (e *encoded) AppendEncoded(b []byte) []byte {
	return append(append(b, e.wire...), make([]byte, e.extra)...)
}

// Codec.Marshal sends an Encoder's bytes as they are, at every size, in place of the
// message's proto encoding, and refuses an Encoder that appends more or less than it
// announced.
func TestCodecSendsWhatAnEncoderEncoded(t *testing.T) {
	var p Pool
	for shift := minShift; shift <= maxShift; shift++ {
		b := bytes.Repeat([]byte{0xff}, 1<<shift)
		p.Put(&b)
	}
	c := NewCodec(&p)
	r := rand.NewChaCha8([32]byte{4})
	for _, n := range []int{0, 1, 1023, 1024, 4090, 256 << 10, 1<<20 + 7} {
		wire := make([]byte, n)
		_, _ = r.Read(wire)
		e := &encoded{BytesValue: wrapperspb.Bytes([]byte("not what is sent")), wire: wire}
		got, err := c.Marshal(e)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(got.Materialize(), wire) {
			t.Errorf("%d bytes: Marshal gave %d bytes, not the %d encoded", n, got.Len(), n)
		}
		got.Free()
		for _, extra := range []int{1, -1} {
			bad := &encoded{BytesValue: e.BytesValue, wire: wire, extra: max(extra, 0)}
			if extra < 0 {
				if n == 0 {
					continue
				}
				bad.wire = wire[:n-1]
				bad.extra = 0
				// announce n, append n-1
				if _, err := c.Marshal(&short{bad, n}); err == nil {
					t.Errorf("%d bytes: an Encoder appending %d: no error", n, n-1)
				}
				continue
			}
			if _, err := c.Marshal(bad); err == nil {
				t.Errorf("%d bytes: an Encoder appending %d: no error", n, n+extra)
			}
		}
	}
}

// A small Encoder's encoding is written into a buffer of the pool that goes back to it
// once gRPC has written it (Free): one allocation per message (the slice of buffers), not
// protobuf's path's three. minPooled must stay the least capacity gRPC pools.
func TestSmallEncodingsComeBackToThePool(t *testing.T) {
	if !mem.IsBelowBufferPoolingThreshold(minPooled-1) || mem.IsBelowBufferPoolingThreshold(minPooled) {
		t.Fatalf("gRPC's pooling threshold moved: minPooled (%d) must be the least size it pools", minPooled)
	}
	c := NewCodec(&Pool{})
	e := &encoded{BytesValue: wrapperspb.Bytes(nil), wire: bytes.Repeat([]byte{7}, 400)}
	allocs := testing.AllocsPerRun(1000, func() {
		s, err := c.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if s.Len() != 400 {
			t.Fatalf("%d bytes, want 400", s.Len())
		}
		s.Free()
	})
	if allocs > 1 {
		t.Errorf("%.1f allocations per small encoding, want at most 1 (its buffer from the pool)", allocs)
	}
}

// short is an Encoder announcing size and appending what its encoded appends.
type short struct {
	*encoded
	size int
}

func (s *short) EncodedSize() int { return s.size }

// Codec.Marshal gives the proto encoding's exact bytes, at every size, into pool buffers
// that held other bytes before: each tier is first filled with 0xff buffers.
func TestCodecMarshalsExactBytes(t *testing.T) {
	var p Pool
	for shift := minShift; shift <= maxShift; shift++ {
		b := bytes.Repeat([]byte{0xff}, 1<<shift)
		p.Put(&b)
	}
	c := NewCodec(&p)
	r := rand.NewChaCha8([32]byte{3})
	for _, n := range []int{0, 1, 1000, 1023, 1024, 4090, 16 << 10, 256<<10 - 3, 256 << 10, 1 << 20, 3<<20 + 7} {
		v := make([]byte, n)
		_, _ = r.Read(v)
		m := wrapperspb.Bytes(v)
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Marshal(m)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(got.Materialize(), want) {
			t.Errorf("%d bytes: Marshal gave %d bytes, not the proto encoding's %d", n, got.Len(), len(want))
		}
		got.Free()
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("Marshal of a string: no error, want gRPC's codec's")
	}
}

func TestGetSizesAndTiers(t *testing.T) {
	for _, c := range []struct {
		n, wantCap int
	}{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {16 << 10, 16 << 10}, {16<<10 + 1, 32 << 10},
		{256<<10 + 5, 512 << 10}, {1 << 20, 1 << 20}, {16 << 20, 16 << 20}, {16<<20 + 1, 16<<20 + 1},
	} {
		var p Pool
		b := p.Get(c.n)
		if len(*b) != c.n || cap(*b) != c.wantCap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", c.n, len(*b), cap(*b), c.n, c.wantCap)
		}
		p.Put(b)
	}
}

func TestPutDropsOddCapacities(t *testing.T) {
	for _, c := range []int{100, 300, 5000, 1<<20 - 1} {
		var p Pool
		b := make([]byte, c)
		p.Put(&b) // a capacity no tier has: dropped, never handed out
		if got := p.Get(c); cap(*got) == c {
			t.Errorf("Get(%d) returned the odd-capacity buffer put back", c)
		}
	}
}

// A server receiving through Pool gets every message's bytes exactly, whatever the buffers
// held before: random payloads of many sizes, interleaved on several streams.
func TestServerReceivesExactBytes(t *testing.T) {
	conn := echoServer(t, ServerOptions()...)
	r := rand.NewChaCha8([32]byte{1, 2})
	sizes := []int{0, 1, 255, 257, 4095, 16 << 10, 16<<10 + 1, 100 << 10, 256 << 10, 300 << 10, 1 << 20, 3 << 20}
	for stream := range 3 {
		st, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpcbuf.Echo/Echo")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 24 {
			n := sizes[(i*7+stream)%len(sizes)]
			if !echoes(t, st, r, n) {
				t.Fatalf("stream %d message %d (%d bytes): the server received other bytes", stream, i, n)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
	}
}

// echoes sends n random bytes from r on st and reports whether the server echoed exactly
// them back.
func echoes(t *testing.T, st grpc.ClientStream, r io.Reader, n int) bool {
	t.Helper()
	msg := make([]byte, n)
	_, _ = r.Read(msg)
	if err := st.SendMsg(wrapperspb.Bytes(msg)); err != nil {
		t.Fatal(err)
	}
	var got wrapperspb.BytesValue
	if err := st.RecvMsg(&got); err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(got.Value, msg)
}

// echoServer serves a stream that sends back every message it receives, with opts, and
// returns a client connection to it.
func echoServer(tb testing.TB, opts ...grpc.ServerOption) *grpc.ClientConn {
	tb.Helper()
	return serve(tb, append(opts, grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		for {
			var m wrapperspb.BytesValue
			if err := st.RecvMsg(&m); err != nil {
				return nil
			}
			if err := st.SendMsg(&m); err != nil {
				return err
			}
		}
	})))
}

// serve starts a gRPC server with opts on a free loopback port until tb ends, and returns a
// client connection to it.
func serve(tb testing.TB, opts []grpc.ServerOption) *grpc.ClientConn {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(8<<20))...)
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// BenchmarkReceive256KiB sends one stream of 64 messages of 256 KiB (the soak's hostile body
// chunks) to a server that only receives them, with gRPC's default pool and codec and with
// ServerOptions. cpu-ns/op is the whole process's CPU time (both ends) per stream.
func BenchmarkReceive256KiB(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []grpc.ServerOption
	}{{"pool=grpc-default", nil}, {"pool=grpcbuf", ServerOptions()}} {
		b.Run(c.name, func(b *testing.B) {
			conn := drainServer(b, c.opts...)
			msg := wrapperspb.Bytes(make([]byte, 256<<10))
			b.SetBytes(64 << 18)
			cpu0 := processCPU()
			for b.Loop() {
				st, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpcbuf.Drain/Drain")
				if err != nil {
					b.Fatal(err)
				}
				for range 64 {
					if err := st.SendMsg(msg); err != nil {
						b.Fatal(err)
					}
				}
				if err := st.CloseSend(); err != nil {
					b.Fatal(err)
				}
				if err := st.RecvMsg(&wrapperspb.BytesValue{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkMarshal256KiB encodes a 256 KiB body message (a full-duplex answer sending a
// body back) and frees it, as gRPC's server does once the message is written: with gRPC's
// proto codec and with Codec.
func BenchmarkMarshal256KiB(b *testing.B) {
	m := wrapperspb.Bytes(make([]byte, 256<<10))
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"codec=grpc", encoding.GetCodecV2(protocodec.Name)}, {"codec=grpcbuf", NewCodec(&Pool{})}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(256 << 10)
			b.ReportAllocs()
			for b.Loop() {
				d, err := c.codec.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				d.Free()
			}
		})
	}
}

// processCPU is the process's user and system CPU time so far, in ns: both ends' work,
// whatever the host's other load does to the wall clock.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// drainServer serves a stream that receives messages until the client ends, then answers
// once; it returns a client connection to it.
func drainServer(tb testing.TB, opts ...grpc.ServerOption) *grpc.ClientConn {
	tb.Helper()
	return serve(tb, append(opts, grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		var m wrapperspb.BytesValue
		for st.RecvMsg(&m) == nil {
		}
		return st.SendMsg(&wrapperspb.BytesValue{})
	})))
}

// poisoned is a Pool that overwrites every buffer put back with 0xA5.
type poisoned struct{ Pool }

func (p *poisoned) Put(b *[]byte) {
	full := (*b)[:cap(*b)]
	for i := range full {
		full[i] = 0xA5
	}
	p.Pool.Put(b)
}

// aliased is an Aliasing message that keeps its buffer until the handler frees it.
type aliased struct{ buf mem.Buffer }

func (a *aliased) UnmarshalAliasing(buf mem.Buffer) error { a.buf = buf; return nil }

// An Aliasing message owns a reference to its buffer: its bytes stay what was received
// after gRPC has let go of the message, in one frame or gathered from several, though
// every buffer put back to the pool is poisoned at once. The handler decodes the message
// only after RecvMsg has returned, echoes it, then frees the buffer.
func TestAliasingMessageOwnsItsBuffer(t *testing.T) {
	p := &poisoned{}
	conn := serve(t, []grpc.ServerOption{experimental.BufferPool(p), grpc.ForceServerCodecV2(NewCodec(p)),
		grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
			for {
				var a aliased
				if err := st.RecvMsg(&a); err != nil {
					return nil
				}
				var m wrapperspb.BytesValue
				err := proto.Unmarshal(a.buf.ReadOnlyData(), &m)
				if err == nil {
					err = st.SendMsg(&m)
				}
				a.buf.Free()
				if err != nil {
					return err
				}
			}
		})})
	st, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpcbuf.Echo/Echo")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.NewChaCha8([32]byte{5})
	for i, n := range []int{0, 1, 2000, 16 << 10, 100 << 10, 300 << 10, 50} {
		if !echoes(t, st, r, n) {
			t.Fatalf("message %d (%d bytes): the server read other bytes from its buffer", i, n)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
}
