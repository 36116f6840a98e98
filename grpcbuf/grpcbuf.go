// Package grpcbuf is the ext_proc server's message buffers (decisions 1182, 1184). gRPC's
// default pool clears every buffer it hands out over its whole capacity, and its proto codec
// gathers a message received in several HTTP/2 frames into a buffer of that pool, rounded up
// to the next tier: a 256 KiB body message is read into sixteen 16 KiB frame buffers, each
// cleared, then copied into a 1 MiB buffer, cleared too. At the onset of the soak's hostile
// load that clearing (runtime.memclrNoHeapPointers) was 14% of the picker's CPU samples. The
// codec also encodes every message it sends into a cleared buffer of that pool.
//
// ServerOptions gives the server a Pool, which neither clears a buffer nor rounds it up past
// the next power of two, and a Codec that gathers received messages and encodes sent ones
// in it. That is safe because every buffer the server takes from its pool is filled before
// it is read (a frame's payload read whole, a message gathered from its frames, a read's n
// bytes, a message encoded to its computed size), as the package's test checks end to end
// with random payloads both ways, and because proto.Unmarshal copies what it keeps out of
// the buffer before the buffer is reused.
//
// A message that implements Aliasing is given the received buffer itself instead: its
// fields may point into the buffer, which goes back to the pool only once the message has
// freed it (decision 1197).
package grpcbuf

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// ServerOptions are a gRPC server's options to receive into one new Pool: the transport's
// frames and the codec's gathered messages.
func ServerOptions() []grpc.ServerOption {
	p := &Pool{}
	return []grpc.ServerOption{experimental.BufferPool(p), grpc.ForceServerCodecV2(NewCodec(p))}
}

// Codec is gRPC's proto codec, except that a message received in several buffers is
// gathered into one from its pool rather than from gRPC's default (clearing) pool, and
// that an Aliasing message decodes itself from the received buffer.
type Codec struct {
	pool mem.BufferPool
	base encoding.CodecV2
}

// NewCodec returns a Codec gathering messages into p, normally a *Pool.
func NewCodec(p mem.BufferPool) Codec {
	return Codec{pool: p, base: encoding.GetCodecV2(protocodec.Name)}
}

// Aliasing is a received message that decodes itself from the buffer it arrived in and
// may keep pointing into it: UnmarshalAliasing is given one reference to buf, which the
// message owns from then on, whatever it returns. It must Free buf exactly once, after
// the last read of any byte of it: the buffer then goes back to the pool, whose next
// user overwrites it. The codec calls UnmarshalAliasing in place of proto.Unmarshal.
type Aliasing interface {
	UnmarshalAliasing(buf mem.Buffer) error
}

// Encoder is a message to send that has encoded itself: the codec sends the EncodedSize
// bytes AppendEncoded appends, in place of protobuf's Size and Marshal (decision 1203).
// They must be the message's protobuf encoding, and AppendEncoded must append exactly
// EncodedSize bytes; both are called once per send, before SendMsg returns.
type Encoder interface {
	EncodedSize() int
	AppendEncoded(b []byte) []byte
}

// Marshal encodes v, an Encoder or a proto.Message (anything else goes to gRPC's codec), as
// gRPC's proto codec does, except that a message of pooling size is written into a buffer of
// the Pool rather than of gRPC's default (clearing) pool: the encoding writes every byte of
// the buffer it is sized to. The picker sends bodies back whole (full-duplex streamed
// answers of 256 KiB prompts at the soak's onset), and gRPC's pool cleared each buffer first.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(Encoder); ok {
		return c.encode(e)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return c.base.Marshal(v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

// minPooled is the least capacity gRPC gives back to a buffer's pool once it has written it
// (mem.NewBuffer): a buffer of at most mem.IsBelowBufferPoolingThreshold's 1 KiB is boxed as
// a SliceBuffer and left to the collector.
const minPooled = 1<<10 + 1

// encode writes e's encoding into a buffer of the pool, of at least minPooled bytes' tier, so
// that a small answer too goes back to the pool once written: protobuf's path allocates
// three times per message under the threshold (the bytes, their boxing and the slice of
// buffers), this one once (the slice).
func (c Codec) encode(e Encoder) (mem.BufferSlice, error) {
	size := e.EncodedSize()
	buf := c.pool.Get(max(size, minPooled))
	b := e.AppendEncoded((*buf)[:0])
	if len(b) != size {
		c.pool.Put(buf)
		return nil, fmt.Errorf("grpcbuf: a %T encoded %d bytes, not the %d it announced", e, len(b), size)
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

// Unmarshal parses data into v: an Aliasing message gets the data in one buffer (the
// received one, else one gathered from the pool) with a reference of its own; a
// proto.Message is decoded by proto.Unmarshal, which copies what it keeps; anything else
// goes to gRPC's codec.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if a, ok := v.(Aliasing); ok {
		return a.UnmarshalAliasing(data.MaterializeToBuffer(c.pool))
	}
	m, ok := v.(proto.Message)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// Name is the content subtype the codec serves: proto.
func (Codec) Name() string { return protocodec.Name }

// Tiers are the buffer sizes pooled: the powers of two from 256 B to 16 MiB. A request
// above the largest is allocated and dropped when put back, as in gRPC's own pool.
const (
	minShift = 8
	maxShift = 24
)

// Pool is a mem.BufferPool that hands out buffers without clearing them. Its zero value
// is ready to use; it is safe for concurrent use.
type Pool struct {
	tiers [maxShift - minShift + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// tier returns the index of the smallest tier holding n bytes, and false when n is over
// the largest.
func tier(n int) (int, bool) {
	if n <= 1<<minShift {
		return 0, true
	}
	shift := bits.Len(uint(n - 1)) // 2^shift >= n > 2^(shift-1)
	if shift > maxShift {
		return 0, false
	}
	return shift - minShift, true
}

// Get returns a buffer of length n whose content is whatever it last held: the caller
// must write before it reads.
func (p *Pool) Get(n int) *[]byte {
	i, ok := tier(n)
	if !ok {
		b := make([]byte, n)
		return &b
	}
	if b, _ := p.tiers[i].Get().(*[]byte); b != nil {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(i+minShift))
	return &b
}

// Put returns b to its tier; a buffer whose capacity is not a tier's size is dropped.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	i, ok := tier(c)
	if !ok || c != 1<<(i+minShift) {
		return
	}
	p.tiers[i].Put(b)
}
