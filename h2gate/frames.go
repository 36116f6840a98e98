package h2gate

import "encoding/binary"

// HTTP/2 frame types and flags the gate reads (RFC 9113, section 6).
const (
	frameData      = 0x0
	frameHeaders   = 0x1
	frameRSTStream = 0x3

	flagEndStream = 0x1
	flagPadded    = 0x8

	frameHeaderLen = 9
	// clientPrefaceLen is the length of "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", which a client
	// sends before its first frame.
	clientPrefaceLen = 24
	// grpcPrefixLen is a gRPC message's prefix: one flag byte and a 4-byte big-endian length.
	grpcPrefixLen = 5
)

// events is what a frame scanner reports to its connection, in the order of the bytes.
type events interface {
	// opened: a stream's first HEADERS frame from the client.
	opened(id uint32)
	// data: bytes of a DATA frame's payload (padding excluded), at offset off of the buffer
	// being scanned. It reports false to refuse the connection.
	data(id uint32, b []byte, off int) bool
	// halfClosed: the client ended its side of the stream (END_STREAM).
	halfClosed(id uint32)
	// ended: the stream was reset (either side) or the server sent its trailers.
	ended(id uint32)
}

// scanner follows one direction of an HTTP/2 connection's byte stream, frame by frame,
// across reads or writes of any size. It never fails: bytes that are not valid HTTP/2 are
// scanned as frames all the same; grpc-go's own framer closes such a connection.
type scanner struct {
	inbound bool // client to server: skip the preface, report DATA and HEADERS
	skip    int  // preface bytes still to skip
	hdr     [frameHeaderLen]byte
	nhdr    int // bytes of hdr filled

	// The current frame, once its header is in.
	typ, flags byte
	id         uint32
	left       int  // payload bytes still to come
	padLen     bool // a PADDED DATA frame whose pad-length byte is still to come
	padding    int  // of left, the trailing padding (DATA)
}

func newScanner(inbound bool) scanner {
	s := scanner{inbound: inbound}
	if inbound {
		s.skip = clientPrefaceLen
	}
	return s
}

// scan reads b, reporting to ev. It reports false when ev refused the connection.
func (s *scanner) scan(b []byte, ev events) bool {
	i := 0
	if s.skip > 0 {
		k := min(s.skip, len(b))
		s.skip -= k
		i = k
	}
	for i < len(b) {
		if s.nhdr < frameHeaderLen {
			k := copy(s.hdr[s.nhdr:], b[i:])
			s.nhdr += k
			i += k
			if s.nhdr == frameHeaderLen {
				s.header(ev)
			}
			continue
		}
		if s.padLen {
			s.padLen = false
			s.left--
			s.padding = min(int(b[i]), s.left)
			i++
		} else {
			k := min(s.left, len(b)-i)
			if d := min(k, s.left-s.padding); d > 0 && s.inbound && s.typ == frameData {
				if !ev.data(s.id, b[i:i+d], i) {
					return false
				}
			}
			s.left -= k
			s.padding = min(s.padding, s.left)
			i += k
		}
		if s.left == 0 {
			s.end(ev)
		}
	}
	return true
}

// header starts the frame whose header is in s.hdr.
func (s *scanner) header(ev events) {
	s.left = int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
	s.typ, s.flags = s.hdr[3], s.hdr[4]
	s.id = binary.BigEndian.Uint32(s.hdr[5:]) & 0x7fffffff
	s.padding = 0
	s.padLen = s.typ == frameData && s.flags&flagPadded != 0 && s.left > 0
	if s.inbound && s.typ == frameHeaders {
		ev.opened(s.id)
	}
	if s.left == 0 {
		s.end(ev)
	}
}

// end finishes the current frame.
func (s *scanner) end(ev events) {
	s.nhdr = 0
	switch {
	case s.typ == frameRSTStream:
		ev.ended(s.id)
	case !s.inbound && s.typ == frameHeaders && s.flags&flagEndStream != 0:
		ev.ended(s.id)
	case s.inbound && (s.typ == frameData || s.typ == frameHeaders) && s.flags&flagEndStream != 0:
		ev.halfClosed(s.id)
	}
}
