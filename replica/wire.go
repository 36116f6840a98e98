package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/loadaware/loadaware-epp/fleet"
)

// Kind is the type of one peer message.
type Kind byte

// The peer message kinds.
const (
	KindFrames  Kind = 1 // LMCache frames an engine (Peer) sent to the origin replica
	KindDelta   Kind = 2 // one booking change on Addr
	KindState   Kind = 3 // the origin's absolute in-flight counts
	KindSnapEnd Kind = 4 // the end of a snapshot: the frames it holds, by origin
)

// DeltaOp is the booking change of a KindDelta message.
type DeltaOp byte

// The booking changes, as fleet.Listener reports them.
const (
	OpBook           DeltaOp = 1 // booked in prefill
	OpDecoding       DeltaOp = 2 // prefill -> decode (first response byte)
	OpReleasePrefill DeltaOp = 3 // ended before its first response byte
	OpReleaseDecode  DeltaOp = 4 // ended while decoding
)

// Limits of one decoded message; larger ones are refused.
const (
	maxString = 256     // a peer IP or an endpoint address
	maxFrames = 1 << 16 // frames of one KindFrames message
	maxLoads  = 1 << 16 // endpoints of one KindState message
	maxSeqs   = 1 << 12 // origins of one KindSnapEnd message
)

const wireVersion = 1

// Message is one peer message. Origin is the sending replica's random id (new at every
// start); Seq numbers its KindFrames messages (one sequence) and its KindDelta and
// KindState messages (another), from 1. Snapshot chunks are KindFrames with Seq 0.
type Message struct {
	Kind   Kind
	Origin uint64
	Seq    uint64

	Peer   string   // KindFrames: the engine's connection IP
	Frames [][]byte // KindFrames: LMCache frames, as the engine sent them

	Addr string  // KindDelta
	Op   DeltaOp // KindDelta
	Tag  uint64  // KindDelta with OpBook: the booking's tag (the prompt's prefix key; 0: none)

	Loads []fleet.Load // KindState

	Seqs   map[uint64]uint64 // KindSnapEnd: the last frame Seq of each origin in the snapshot
	Chunks uint64            // KindSnapEnd: how many chunks came before it
}

// errWire is wrapped by every decoding error.
var errWire = errors.New("replica: malformed peer message")

// AppendEncode appends m's encoding to dst.
func AppendEncode(dst []byte, m Message) []byte {
	dst = append(dst, wireVersion, byte(m.Kind))
	dst = binary.LittleEndian.AppendUint64(dst, m.Origin)
	dst = binary.AppendUvarint(dst, m.Seq)
	switch m.Kind {
	case KindFrames:
		dst = appendString(dst, m.Peer)
		dst = binary.AppendUvarint(dst, uint64(len(m.Frames)))
		for _, f := range m.Frames {
			dst = binary.AppendUvarint(dst, uint64(len(f)))
			dst = append(dst, f...)
		}
	case KindDelta:
		dst = appendString(dst, m.Addr)
		dst = append(dst, byte(m.Op))
		if m.Op == OpBook && m.Tag != 0 {
			dst = binary.AppendUvarint(dst, m.Tag)
		}
	case KindState:
		dst = binary.AppendUvarint(dst, uint64(len(m.Loads)))
		for _, l := range m.Loads {
			dst = appendString(dst, l.Addr)
			dst = binary.AppendUvarint(dst, uint64(max(l.Prefill, 0)))
			dst = binary.AppendUvarint(dst, uint64(max(l.Decode, 0)))
		}
	case KindSnapEnd:
		dst = binary.AppendUvarint(dst, m.Chunks)
		dst = binary.AppendUvarint(dst, uint64(len(m.Seqs)))
		for o, s := range m.Seqs {
			dst = binary.LittleEndian.AppendUint64(dst, o)
			dst = binary.AppendUvarint(dst, s)
		}
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// Decode parses one peer message. Frames alias b. Every error wraps errWire and says
// what was wrong; nothing in b can make it panic or allocate more than a small multiple
// of len(b).
func Decode(b []byte) (Message, error) {
	r := reader{b: b}
	var m Message
	if v := r.byte("version"); r.err == nil && v != wireVersion {
		return m, fmt.Errorf("%w: version %d (this replica speaks %d: run one version across the replicas)", errWire, v, wireVersion)
	}
	m.Kind = Kind(r.byte("kind"))
	m.Origin = r.u64("origin")
	m.Seq = r.uvarint("seq")
	switch m.Kind {
	case KindFrames:
		m.Peer = r.str("peer")
		n := r.count("frames", maxFrames, 1)
		if r.err == nil {
			m.Frames = make([][]byte, 0, n)
		}
		for i := 0; i < n && r.err == nil; i++ {
			m.Frames = append(m.Frames, r.bytes("frame"))
		}
	case KindDelta:
		m.Addr = r.str("addr")
		m.Op = DeltaOp(r.byte("op"))
		if r.err == nil && (m.Op < OpBook || m.Op > OpReleaseDecode) {
			r.err = fmt.Errorf("%w: unknown booking change %d", errWire, m.Op)
		}
		if r.err == nil && m.Op == OpBook && len(r.b) > 0 {
			// The tag is optional (absent when 0, and from replicas older than it), so
			// an older replica's bookings still decode.
			m.Tag = r.uvarint("tag")
		}
	case KindState:
		n := r.count("loads", maxLoads, 3)
		if r.err == nil {
			m.Loads = make([]fleet.Load, 0, n)
		}
		for i := 0; i < n && r.err == nil; i++ {
			l := fleet.Load{Addr: r.str("addr")}
			l.Prefill = r.small("prefill")
			l.Decode = r.small("decode")
			m.Loads = append(m.Loads, l)
		}
	case KindSnapEnd:
		m.Chunks = r.uvarint("chunks")
		n := r.count("origins", maxSeqs, 9)
		if r.err == nil {
			m.Seqs = make(map[uint64]uint64, n)
		}
		for i := 0; i < n && r.err == nil; i++ {
			o := r.u64("origin")
			m.Seqs[o] = r.uvarint("seq")
		}
	default:
		if r.err == nil {
			r.err = fmt.Errorf("%w: unknown kind %d", errWire, m.Kind)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the %s message", errWire, len(r.b), m.Kind)
	}
	if r.err != nil {
		return Message{}, r.err
	}
	return m, nil
}

func (k Kind) String() string {
	switch k {
	case KindFrames:
		return "frames"
	case KindDelta:
		return "delta"
	case KindState:
		return "state"
	case KindSnapEnd:
		return "snapshot-end"
	}
	return fmt.Sprintf("kind-%d", byte(k))
}

// reader consumes b; the first error sticks and later reads return zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what, why string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s: %s", errWire, what, why)
	}
}

func (r *reader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.fail(what, "truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u64(what string) uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.fail(what, "truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what, "bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a length of at most limit items of at least minBytes each.
func (r *reader) count(what string, limit, minBytes int) int {
	v := r.uvarint(what)
	if r.err != nil {
		return 0
	}
	if v > uint64(limit) || v*uint64(minBytes) > uint64(len(r.b)) {
		r.fail(what, fmt.Sprintf("count %d is over the limit or the bytes left", v))
		return 0
	}
	return int(v)
}

func (r *reader) small(what string) int {
	v := r.uvarint(what)
	if v > 1<<31-1 {
		r.fail(what, "too large")
		return 0
	}
	return int(v)
}

func (r *reader) bytes(what string) []byte {
	n := r.uvarint(what)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail(what, "length past the end")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) str(what string) string {
	n := r.uvarint(what)
	if r.err != nil {
		return ""
	}
	if n > maxString || n > uint64(len(r.b)) {
		r.fail(what, "length over the limit or past the end")
		return ""
	}
	v := string(r.b[:n])
	r.b = r.b[n:]
	return v
}
