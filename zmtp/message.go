package zmtp

import "sync"

// smallMessageBytes is the buffer each connection keeps for its messages: a worker's batch
// of 50 admits (about 3 KiB encoded) fits.
const smallMessageBytes = 4 << 10

// largeBuffers holds the buffers of messages larger than smallMessageBytes between
// messages (*[]byte). A connection takes one when its message outgrows its small buffer
// and returns it once the message is handed on, so back-to-back large messages reuse one
// buffer instead of growing a new one each, and a connection waiting for its peer holds
// none: the pool holds at most as many as were in use at once (each within one
// connection's bound), and the collector frees those left unused.
var largeBuffers sync.Pool

// message holds the buffers of the message a connection is reading, encoded as it will be
// written (Forward keeps the slice in use and appends to it, growing it with grow). The
// buffer never grows past maxBytes, the most a message within the Limits encodes to (its
// bytes and a 9-byte header a frame), so what it holds is within the per-connection bound
// whatever the growth.
type message struct {
	small    []byte  // the connection's own buffer
	box      *[]byte // the pool's box of the large buffer in use, if any
	maxBytes int
}

func newMessage(lim Limits) message {
	return message{
		small:    make([]byte, 0, smallMessageBytes),
		maxBytes: int(min(lim.MessageBytes+9*int64(max(lim.MessageFrames, 0)), 1<<40)),
	}
}

// grow returns b in a buffer of at least need bytes (at most maxBytes, but need): from the
// pool first, else doubling.
func (m *message) grow(b []byte, need int) []byte {
	if m.box == nil {
		if p, _ := largeBuffers.Get().(*[]byte); p != nil {
			if c := cap(*p); c >= need && c <= m.maxBytes {
				m.box = p
				return append((*p)[:0], b...)
			}
			// another connection's, of other Limits: too small or over this one's bound
		}
	}
	c := min(max(need, 2*cap(b)), max(m.maxBytes, need))
	nb := make([]byte, len(b), c)
	copy(nb, b)
	return nb
}

// reset returns b's buffer to the pool if it is a large one, and the small buffer, empty.
func (m *message) reset(b []byte) []byte {
	if cap(b) > smallMessageBytes {
		m.release(b)
	}
	return m.small[:0]
}

// release puts the large buffer b in the pool.
func (m *message) release(b []byte) {
	if m.box == nil {
		m.box = new([]byte)
	}
	*m.box = b[:0]
	largeBuffers.Put(m.box)
	m.box = nil
}
