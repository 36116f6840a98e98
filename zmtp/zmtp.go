// Package zmtp reads the peer's side of a ZMTP 3.x connection (the NULL mechanism, as
// LMCache's pyzmq sockets use it) and forwards it to a libzmq socket, keeping every message
// within bounds that libzmq cannot apply itself: its ZMQ_MAXMSGSIZE bounds one frame, and it
// reads a message's frames all before its high-water mark counts the message, so one peer
// can make it hold a message of any size (decision 1178).
//
// Forward writes nothing of a message to libzmq before the message's last frame is read and
// the whole is within the bounds: a message over them is read to its end and dropped (its
// bytes are discarded as they arrive, none is held, and the caller is told of them before
// they are read, so that it can charge and pace the peer); a frame over the frame cap ends the
// connection before its bytes are read, as libzmq does. The peer's READY command is rewritten
// to carry only its Socket-Type and Identity and the forwarder's own properties (the peer's
// address, say), so the controller knows the peer's IP although libzmq's own Peer-Address is
// the forwarder's, and the peer cannot set them.
package zmtp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Property is a READY property Forward writes (libzmq gives it as every message's metadata
// under Name; application properties are named X-...). A peer's own property of any name
// other than Socket-Type and Identity is dropped, so a peer cannot set one.
type Property struct {
	Name, Value string
}

// MaxCommandBytes bounds a command frame (READY, PING, PONG, ERROR): a READY of a socket
// type and a 255-byte identity is under 300 bytes.
const MaxCommandBytes = 4 << 10

const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04

	greetingBytes  = 64
	signatureBytes = 10
)

// Limits bounds what one message may carry to libzmq.
type Limits struct {
	// FrameBytes is the largest frame: a larger one ends the connection before it is read.
	FrameBytes int64
	// MessageBytes is the most bytes of all a message's frames together; a message over it
	// is dropped.
	MessageBytes int64
	// MessageFrames is the most frames of one message; a message of more is dropped.
	MessageFrames int
}

// Drop describes a message read to its end and not forwarded.
type Drop struct {
	Frames int   // the message's frames
	Bytes  int64 // its bytes, all frames together
	Wire   int64 // its bytes on the wire: Bytes and its frames' headers (2 or 9 bytes each)
	// OverFrames: the message went over Limits.MessageFrames before Limits.MessageBytes.
	OverFrames bool
}

// Drops is told of the messages Forward drops; either function may be nil.
type Drops struct {
	// Charge is called with the wire bytes of a message being dropped (frames' headers
	// included, so that empty frames cost too) before its frames' bodies are read and
	// discarded: once the message goes over the limits, with all it came with so far (the
	// frame whose header was just read included), then with each later frame's. Over a
	// message read to its end the calls sum to its Drop.Wire. It may block, to pace the
	// peer (the caller charges the bytes to the peer's rate); an error ends Forward with it.
	Charge func(n int64) error
	// Dropped is called once a dropped message is read to its end.
	Dropped func(Drop)
	// Commands is called with the charges of the command frames after READY (PING, PONG,
	// ...), which Forward hands on at once: each command's wire bytes (headers included, 2
	// or 9 bytes each, so that empty ones cost too), at least CommandMinChargeBytes. It is
	// called with sums of at least CommandChargeBytes as they accumulate, and with the rest
	// before Forward waits for the peer's next bytes (whole messages and commands read are
	// handed on first). With a stream that ends cleanly the calls sum to every command's
	// charge. It may block, to pace the peer, as Charge; an error ends Forward with it.
	Commands func(n int64) error
}

// CommandChargeBytes is how many wire bytes of commands Forward reads before it tells
// Drops.Commands of them at the latest: a peer's commands are read at most this far
// ahead of their charge, and a flood of them costs one call and one flush to libzmq per
// CommandChargeBytes, not one a command.
const CommandChargeBytes = 4 << 10

// CommandMinChargeBytes is the least a command is charged (Drops.Commands), whatever its
// wire bytes: libzmq's work is per command (a PING is answered with a PONG), and a 9-byte
// PING charged 9 would let a peer's byte rate buy 7 commands for each frame of a 60-byte
// admit. At 64, the per-frame overhead a message's bound counts, commands cost at least
// what the frames of messages do (decision 1211).
const CommandMinChargeBytes = 64

// ProtocolError is a peer's departure from ZMTP 3.x with the NULL mechanism, or a frame or
// command over its cap: Forward ends the connection.
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return "zmtp: " + e.Reason }

// ErrFrameTooLarge is wrapped by the ProtocolError of a frame over Limits.FrameBytes.
var ErrFrameTooLarge = errors.New("frame over the frame cap")

type frameError struct {
	size, max int64
}

func (e *frameError) Error() string {
	return fmt.Sprintf("zmtp: a frame of %d bytes announced, over the cap of %d", e.size, e.max)
}

func (e *frameError) Unwrap() error { return ErrFrameTooLarge }

func protocolf(format string, args ...any) error {
	return &ProtocolError{Reason: fmt.Sprintf(format, args...)}
}

// Forward reads the peer's ZMTP stream from peer and writes it to inner (a libzmq socket's
// connection) within lim, until the peer's stream ends (nil at a message's boundary) or
// breaks the protocol or a bound (a *ProtocolError or a frame error wrapping
// ErrFrameTooLarge), or a write fails, or drops.Charge fails. props are written into the
// peer's READY (names and values of at most 255 bytes). drops is told of each message
// dropped, its bytes before they are read (see Drops). Forward reads the
// greeting in the steps libzmq sends it (signature, major version, rest), forwarding each,
// since each side waits for the other's step before its next. It never holds more than one
// message of at most lim.MessageBytes and lim.MessageFrames frames, besides its buffers.
func Forward(peer io.Reader, inner io.Writer, props []Property, lim Limits, drops Drops) error {
	for _, p := range props {
		if len(p.Name) > 255 || len(p.Value) > 255 {
			return errors.New("zmtp: a property's name or value over 255 bytes")
		}
	}
	r := bufio.NewReaderSize(peer, 32<<10)
	w := bufio.NewWriterSize(inner, 32<<10)
	var g [greetingBytes]byte
	for _, step := range [][2]int{{0, signatureBytes}, {signatureBytes, signatureBytes + 1}, {signatureBytes + 1, greetingBytes}} {
		if _, err := io.ReadFull(r, g[step[0]:step[1]]); err != nil {
			return endOf("the greeting", err)
		}
		if err := checkGreeting(g[:step[1]]); err != nil {
			return err
		}
		if _, err := w.Write(g[step[0]:step[1]]); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	// READY, rewritten
	flags, size, err := header(r, MaxCommandBytes)
	if err != nil {
		return endOf("the READY command", err)
	}
	if flags&flagCommand == 0 {
		return protocolf("a message before the READY command")
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return endOf("the READY command", err)
	}
	ready, err := RewriteReady(body, props)
	if err != nil {
		return err
	}
	if err := writeFrame(w, flagCommand, ready); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}

	cmd := make([]byte, MaxCommandBytes)
	bufs := newMessage(lim)
	msg := bufs.small // the message being read, encoded as it will be written
	var frames int
	var bytes, wire int64 // the message's so far: its frames' bodies; with their headers
	var commands int64    // commands' wire bytes read and not yet charged
	drop, overFrames := false, false
	for {
		if r.Buffered() == 0 {
			// nothing more to read at once: hand on what is whole and charge the commands
			// read before waiting
			if w.Buffered() > 0 {
				if err := w.Flush(); err != nil {
					return err
				}
			}
			if commands > 0 && drops.Commands != nil {
				if err := drops.Commands(commands); err != nil {
					return err
				}
			}
			commands = 0
		}
		flags, size, err := header(r, lim.FrameBytes)
		if err != nil {
			if errors.Is(err, io.EOF) && frames == 0 {
				return w.Flush() // the peer closed between messages
			}
			return flushed(w, endOf("a frame", err))
		}
		if flags&flagCommand != 0 {
			// A command is handed on at once: between messages it keeps its place, within
			// one it moves to before the message, which libzmq takes as the same.
			// It is read whole first: nothing of a frame cut short is handed on.
			if commands += max(headerBytes(flags)+size, CommandMinChargeBytes); commands >= CommandChargeBytes {
				if err := charge(w, drops.Commands, commands); err != nil {
					return err
				}
				commands = 0
			}
			cmd = cmd[:size]
			if _, err := io.ReadFull(r, cmd); err != nil {
				return flushed(w, endOf("a command", err))
			}
			if err := writeFrame(w, flags, cmd); err != nil {
				return err
			}
			continue
		}
		frames++
		bytes += size
		onWire := headerBytes(flags) + size
		wire += onWire
		if !drop && (frames > lim.MessageFrames || bytes > lim.MessageBytes) {
			drop, overFrames = true, frames > lim.MessageFrames
			msg = bufs.reset(msg)
			if err := charge(w, drops.Charge, wire); err != nil {
				return err
			}
		} else if drop {
			if err := charge(w, drops.Charge, onWire); err != nil {
				return err
			}
		}
		if drop {
			if _, err := r.Discard(int(size)); err != nil {
				return flushed(w, endOf("a frame", err))
			}
		} else {
			if need := len(msg) + int(headerBytes(flags)+size); need > cap(msg) {
				msg = bufs.grow(msg, need)
			}
			msg = appendSize(append(msg, flags), flags, size)
			n := len(msg)
			msg = msg[:n+int(size)]
			if _, err := io.ReadFull(r, msg[n:]); err != nil {
				return flushed(w, endOf("a frame", err))
			}
		}
		if flags&flagMore != 0 {
			continue
		}
		if drop {
			if drops.Dropped != nil {
				drops.Dropped(Drop{Frames: frames, Bytes: bytes, Wire: wire, OverFrames: overFrames})
			}
		} else if _, err := w.Write(msg); err != nil {
			return err
		}
		msg = bufs.reset(msg)
		frames, bytes, wire, drop = 0, 0, 0, false
	}
}

// charge hands on the whole messages w holds, then tells f (Drops.Charge or Commands) of n
// bytes: whatever it waits, libzmq is not kept from what was read before.
func charge(w *bufio.Writer, f func(int64) error, n int64) error {
	if f == nil {
		return nil
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f(n)
}

// flushed hands on the whole messages w holds before the peer's stream ended or broke with
// err, and returns err.
func flushed(w *bufio.Writer, err error) error {
	w.Flush() // a write error is moot: the connection ends with err
	return err
}

// endOf turns an end of the peer's stream within something into an error naming it.
func endOf(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return protocolf("the peer's stream ended within %s", what)
	}
	return err
}

// checkGreeting checks the greeting's bytes read so far: a ZMTP 3.x peer of the NULL
// mechanism.
func checkGreeting(g []byte) error {
	if g[0] != 0xff || len(g) >= signatureBytes && g[signatureBytes-1]&1 == 0 {
		return protocolf("not a ZMTP 3 greeting (ZMTP 1.0 or another protocol)")
	}
	if len(g) > signatureBytes && g[signatureBytes] < 3 {
		return protocolf("ZMTP %d.x peer: only ZMTP 3.x is served (libzmq 4 and later, pyzmq 14 and later)", g[signatureBytes])
	}
	if len(g) == greetingBytes {
		// the mechanism's name, padded with zero bytes to 20
		if mech := bytes.TrimRight(g[12:32], "\x00"); string(mech) != "NULL" {
			return protocolf("security mechanism %q: only NULL is served (LMCache's sockets use it)", mech)
		}
	}
	return nil
}

// header reads a frame's flags and size from r; a data frame over max is an error wrapping
// ErrFrameTooLarge, a command over MaxCommandBytes a *ProtocolError.
func header(r *bufio.Reader, max int64) (flags byte, size int64, err error) {
	flags, err = r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return 0, 0, protocolf("frame flags %#x: reserved bits set", flags)
	}
	if flags&flagCommand != 0 && flags&flagMore != 0 {
		return 0, 0, protocolf("a command frame with more to follow")
	}
	if flags&flagLong == 0 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, 0, io.ErrUnexpectedEOF
		}
		size = int64(b)
	} else {
		var u uint64 // read a byte at a time: an array read through io.ReadFull escapes
		for range 8 {
			b, err := r.ReadByte()
			if err != nil {
				return 0, 0, io.ErrUnexpectedEOF
			}
			u = u<<8 | uint64(b)
		}
		if u > 1<<62 {
			u = 1 << 62
		}
		size = int64(u)
	}
	if flags&flagCommand == 0 && size > max {
		return 0, 0, &frameError{size: size, max: max}
	}
	if flags&flagCommand != 0 && size > MaxCommandBytes {
		return 0, 0, protocolf("a command of %d bytes, over %d", size, MaxCommandBytes)
	}
	return flags, size, nil
}

// headerBytes is the length of a frame's header of flags: the flags and the size.
func headerBytes(flags byte) int64 {
	if flags&flagLong != 0 {
		return 9
	}
	return 2
}

func appendSize(b []byte, flags byte, size int64) []byte {
	if flags&flagLong != 0 {
		return binary.BigEndian.AppendUint64(b, uint64(size))
	}
	return append(b, byte(size))
}

// writeFrame writes a frame of body with flags (the LONG flag set as its size needs).
func writeFrame(w *bufio.Writer, flags byte, body []byte) error {
	flags &^= flagLong
	if len(body) > 255 {
		flags |= flagLong
	}
	var head [9]byte
	if _, err := w.Write(appendSize(append(head[:0], flags), flags, int64(len(body)))); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// RewriteReady checks a READY command's body (name and properties) and returns a READY
// carrying its Socket-Type and Identity properties and props, nothing else. Property names are compared without regard to case (ZMTP 3); a READY without a
// Socket-Type, or malformed, is a *ProtocolError.
func RewriteReady(body []byte, props []Property) ([]byte, error) {
	const name = "READY"
	if len(body) < 1+len(name) || int(body[0]) != len(name) || string(body[1:1+len(name)]) != name {
		return nil, protocolf("the first command is not READY")
	}
	out := append(make([]byte, 0, 64+len(body)), byte(len(name)))
	out = append(out, name...)
	var haveType, haveID bool
	p := body[1+len(name):]
	for len(p) > 0 {
		n := int(p[0])
		if len(p) < 1+n+4 {
			return nil, protocolf("a READY property cut short")
		}
		key := p[1 : 1+n]
		vn := binary.BigEndian.Uint32(p[1+n : 1+n+4])
		if uint64(len(p)-(1+n+4)) < uint64(vn) {
			return nil, protocolf("a READY property's value cut short")
		}
		val := p[1+n+4 : 1+n+4+int(vn)]
		p = p[1+n+4+int(vn):]
		var dup *bool
		switch {
		case equalFold(key, "Socket-Type"):
			dup = &haveType
		case equalFold(key, "Identity"):
			dup = &haveID
		default:
			continue
		}
		if *dup {
			return nil, protocolf("READY property %q twice", key)
		}
		*dup = true
		out = appendProperty(out, string(key), val)
	}
	if !haveType {
		return nil, protocolf("READY without a Socket-Type")
	}
	for _, p := range props {
		out = appendProperty(out, p.Name, []byte(p.Value))
	}
	return out, nil
}

func appendProperty(b []byte, name string, val []byte) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(val)))
	return append(b, val...)
}

func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
