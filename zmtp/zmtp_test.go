package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/iotest"
)

// greeting is a ZMTP 3.1 client's greeting of mechanism mech.
func greeting(major byte, mech string) []byte {
	g := make([]byte, greetingBytes)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, major, 1
	copy(g[12:32], mech)
	return g
}

func frame(flags byte, body []byte) []byte {
	var b bytes.Buffer
	if len(body) > 255 {
		flags |= flagLong
	}
	b.WriteByte(flags)
	b.Write(appendSize(nil, flags, int64(len(body))))
	b.Write(body)
	return b.Bytes()
}

func ready(props ...string) []byte {
	body := append([]byte{5}, "READY"...)
	for i := 0; i+1 < len(props); i += 2 {
		body = appendProperty(body, props[i], []byte(props[i+1]))
	}
	return frame(flagCommand, body)
}

// msg encodes one message of the given frames.
func msg(frames ...[]byte) []byte {
	var b []byte
	for i, f := range frames {
		fl := byte(0)
		if i < len(frames)-1 {
			fl = flagMore
		}
		b = append(b, frame(fl, f)...)
	}
	return b
}

func many(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = bytes.Repeat([]byte{'x'}, size)
	}
	return out
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var testLimits = Limits{FrameBytes: 1000, MessageBytes: 1000, MessageFrames: 4}

// The forwarder's properties in the tests: the peer's address and a key.
const PeerProperty, KeyProperty = "X-Loadaware-Peer", "X-Loadaware-Key"

var testProps = []Property{{PeerProperty, "10.0.0.1"}, {KeyProperty, "k3y"}}

func TestForward(t *testing.T) {
	hello := cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH"))
	wantHello := cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH", PeerProperty, "10.0.0.1", KeyProperty, "k3y"))
	ping := frame(flagCommand, append([]byte{4}, "PING\x00\x00"...))
	for _, tt := range []struct {
		name    string
		in      []byte
		want    []byte // forwarded
		drops   []Drop
		charges []int64 // Drops.Charge's calls
		cmds    []int64 // Drops.Commands' calls
		err     string  // "" : nil; else a substring of the error
		tooLong bool    // the error wraps ErrFrameTooLarge
	}{
		{name: "messages of one and many frames, a long frame", in: cat(hello, msg([]byte("a")), msg([]byte("b"), []byte("c"), bytes.Repeat([]byte{'y'}, 300))),
			want: cat(wantHello, msg([]byte("a")), msg([]byte("b"), []byte("c"), bytes.Repeat([]byte{'y'}, 300)))},
		{name: "the peer's own peer property and others are dropped, the identity kept",
			in:   cat(greeting(3, "NULL"), ready("socket-type", "DEALER", "x-loadaware-peer", "6.6.6.6", PeerProperty, "6.6.6.6", KeyProperty, "guess", "Identity", "w1", "Resource", "r"), msg([]byte("a"))),
			want: cat(greeting(3, "NULL"), ready("socket-type", "DEALER", "Identity", "w1", PeerProperty, "10.0.0.1", KeyProperty, "k3y"), msg([]byte("a")))},
		{name: "a message at the bounds is kept", in: cat(hello, msg(many(4, 250)...)), want: cat(wantHello, msg(many(4, 250)...))},
		{name: "a message of too many frames is dropped, the next kept", in: cat(hello, msg(many(5, 1)...), msg([]byte("after"))),
			want: cat(wantHello, msg([]byte("after"))), drops: []Drop{{Frames: 5, Bytes: 5, Wire: 15, OverFrames: true}}, charges: []int64{15}},
		{name: "a message of too many bytes is dropped, the next kept", in: cat(hello, msg(many(3, 400)...), msg([]byte("after"))),
			want: cat(wantHello, msg([]byte("after"))), drops: []Drop{{Frames: 3, Bytes: 1200, Wire: 1227}}, charges: []int64{1227}},
		{name: "a dropped message's later frames are charged one by one, with their headers", in: cat(hello, msg(append(many(4, 300), nil, []byte("x"))...), msg([]byte("after"))),
			want: cat(wantHello, msg([]byte("after"))), drops: []Drop{{Frames: 6, Bytes: 1201, Wire: 1241}}, charges: []int64{1236, 2, 3}},
		{name: "empty frames past the frame bound are charged their headers", in: cat(hello, msg(many(6, 0)...), msg([]byte("after"))),
			want: cat(wantHello, msg([]byte("after"))), drops: []Drop{{Frames: 6, Wire: 12, OverFrames: true}}, charges: []int64{10, 2}},
		{name: "a dropped message cut short: charged what its frames announced", in: cat(hello, msg([]byte("a")), frame(flagMore, bytes.Repeat([]byte{'w'}, 900)), frame(flagMore, bytes.Repeat([]byte{'w'}, 200))[:50]),
			want: cat(wantHello, msg([]byte("a"))), charges: []int64{1111}, err: "ended within a frame"},
		{name: "a frame over the cap ends the connection, nothing of its message forwarded", in: cat(hello, msg([]byte("a")), msg([]byte("b"), bytes.Repeat([]byte{'z'}, 1001))),
			want: cat(wantHello, msg([]byte("a"))), err: "over the cap", tooLong: true},
		{name: "a frame announcing 2^64-1 bytes", in: cat(hello, []byte{flagLong, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
			want: wantHello, err: "over the cap", tooLong: true},
		{name: "a command within a message is handed on before it", in: cat(hello, frame(flagMore, []byte("a")), ping, frame(0, []byte("b"))),
			want: cat(wantHello, ping, msg([]byte("a"), []byte("b"))), cmds: []int64{64}},
		{name: "commands are charged their wire bytes, at least 64 each", in: cat(hello, ping, msg([]byte("a")), []byte{flagCommand | flagLong, 0, 0, 0, 0, 0, 0, 0, 5, 4, 'P', 'O', 'N', 'G'}),
			want: cat(wantHello, ping, msg([]byte("a")), frame(flagCommand, []byte("\x04PONG"))), cmds: []int64{64 + 64}},
		{name: "a command over the least charge is charged its wire bytes", in: cat(hello, frame(flagCommand, append([]byte{4}, "PING"+string(bytes.Repeat([]byte("x"), 95))...)), msg([]byte("a"))),
			want: cat(wantHello, frame(flagCommand, append([]byte{4}, "PING"+string(bytes.Repeat([]byte("x"), 95))...)), msg([]byte("a"))), cmds: []int64{102}},
		{name: "a flood of commands is charged as it is read, every 4 KiB", in: cat(hello, bytes.Repeat(ping, 1000)),
			want: cat(wantHello, bytes.Repeat(ping, 1000)), cmds: []int64{4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 40 * 64}},
		{name: "a command cut short", in: cat(hello, ping, ping[:5]), want: cat(wantHello, ping), err: "ended within a command"},
		{name: "a stream ended within a message forwards none of it", in: cat(hello, msg([]byte("a")), frame(flagMore, []byte("b"))),
			want: cat(wantHello, msg([]byte("a"))), err: "ended within a frame"},
		{name: "a stream ended within a frame", in: cat(hello, frame(0, []byte("abc"))[:3]), want: wantHello, err: "ended within a frame"},
		{name: "CURVE refused", in: cat(greeting(3, "CURVE"), ready("Socket-Type", "PUSH")), want: greeting(3, "CURVE")[:11], err: `mechanism "CURVE"`},
		{name: "ZMTP 2 refused", in: greeting(1, "NULL"), want: greeting(1, "NULL")[:10], err: "ZMTP 1.x peer"},
		{name: "not ZMTP", in: []byte("GET / HTTP/1.1\r\n\r\n"), err: "not a ZMTP 3 greeting"},
		{name: "a message before READY", in: cat(greeting(3, "NULL"), msg([]byte("a"))), want: greeting(3, "NULL"), err: "before the READY"},
		{name: "READY without a socket type", in: cat(greeting(3, "NULL"), ready("Identity", "x")), want: greeting(3, "NULL"), err: "without a Socket-Type"},
		{name: "READY with two socket types", in: cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH", "Socket-Type", "PUB")), want: greeting(3, "NULL"), err: "twice"},
		{name: "another command first", in: cat(greeting(3, "NULL"), ping), want: greeting(3, "NULL"), err: "not READY"},
		{name: "a command over its cap", in: cat(hello, frame(flagCommand, bytes.Repeat([]byte{'p'}, MaxCommandBytes+1))), want: wantHello, err: "a command of"},
		{name: "reserved flag bits", in: cat(hello, []byte{0x08, 0}), want: wantHello, err: "reserved bits"},
		{name: "a command with more", in: cat(hello, frame(flagCommand|flagMore, []byte("\x04PING"))), want: wantHello, err: "command frame with more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			var drops []Drop
			var charges, cmds []int64
			err := Forward(bytes.NewReader(tt.in), &out, testProps, testLimits, Drops{
				Charge:   func(n int64) error { charges = append(charges, n); return nil },
				Dropped:  func(d Drop) { drops = append(drops, d) },
				Commands: func(n int64) error { cmds = append(cmds, n); return nil },
			})
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.err))) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
			if errors.Is(err, ErrFrameTooLarge) != tt.tooLong {
				t.Errorf("err %v wraps ErrFrameTooLarge: %v, want %v", err, !tt.tooLong, tt.tooLong)
			}
			var pe *ProtocolError
			if err != nil && !tt.tooLong && !errors.As(err, &pe) {
				t.Errorf("err %T is not a *ProtocolError", err)
			}
			if !bytes.Equal(out.Bytes(), tt.want) {
				t.Errorf("forwarded\n%q\nwant\n%q", out.Bytes(), tt.want)
			}
			if fmt.Sprint(drops) != fmt.Sprint(tt.drops) {
				t.Errorf("drops %v, want %v", drops, tt.drops)
			}
			if fmt.Sprint(charges) != fmt.Sprint(tt.charges) {
				t.Errorf("charges %v, want %v", charges, tt.charges)
			}
			if fmt.Sprint(cmds) != fmt.Sprint(tt.cmds) {
				t.Errorf("commands charged %v, want %v", cmds, tt.cmds)
			}
		})
	}
}

// Drops.Charge is called before a dropped message's bytes are read, with the whole messages
// read before it handed on (its wait, pacing the peer, delays nothing already read), and its
// error ends Forward.
func TestForwardChargeBeforeReading(t *testing.T) {
	hello := cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH"))
	wantHello := cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH", PeerProperty, "10.0.0.1", KeyProperty, "k3y"))
	in := bytes.NewReader(cat(hello, msg([]byte("a")), msg(many(3, 400)...), msg([]byte("b"))))
	var out bytes.Buffer
	stop := errors.New("stop")
	var unread int
	err := Forward(iotest.OneByteReader(in), &out, testProps, testLimits, Drops{Charge: func(n int64) error {
		unread = in.Len()
		if !bytes.Equal(out.Bytes(), cat(wantHello, msg([]byte("a")))) {
			t.Errorf("at the charge, forwarded %q; want the message before it", out.Bytes())
		}
		return stop
	}})
	if !errors.Is(err, stop) {
		t.Fatalf("err = %v, want the charge's", err)
	}
	if rest := 400 + len(msg([]byte("b"))); unread != rest {
		t.Errorf("charged with %d bytes unread, want the dropped frame's 400 and the next message's (%d)", unread, rest)
	}
}

// Drops.Commands is told of the commands read before Forward waits for the peer's next
// bytes, with them handed on first; its error ends Forward.
func TestForwardChargesCommandsBeforeWaiting(t *testing.T) {
	hello := cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH"))
	wantHello := cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH", PeerProperty, "10.0.0.1", KeyProperty, "k3y"))
	ping := frame(flagCommand, append([]byte{4}, "PING\x00\x00"...))
	in := bytes.NewReader(cat(hello, msg([]byte("a")), ping, ping, msg([]byte("b"))))
	var out bytes.Buffer
	stop := errors.New("stop")
	var calls []int64
	var unread []int
	// A byte a read: Forward waits for the peer after each frame.
	err := Forward(iotest.OneByteReader(in), &out, testProps, testLimits, Drops{Commands: func(n int64) error {
		calls = append(calls, n)
		unread = append(unread, in.Len())
		if len(calls) == 1 {
			return nil
		}
		if want := cat(wantHello, msg([]byte("a")), ping, ping); !bytes.Equal(out.Bytes(), want) {
			t.Errorf("at the charge, forwarded %q; want %q", out.Bytes(), want)
		}
		return stop
	}})
	if !errors.Is(err, stop) {
		t.Fatalf("err = %v, want the charge's", err)
	}
	if rest := len(msg([]byte("b"))); fmt.Sprint(calls, unread) != fmt.Sprint([]int64{64, 64}, []int{len(ping) + rest, rest}) {
		t.Errorf("charges %v with %v bytes unread; want each ping's 64 (its 9 bytes, raised to the least charge) once it is read", calls, unread)
	}
}

// A write to libzmq that fails ends Forward with its error.
func TestForwardWriteError(t *testing.T) {
	boom := errors.New("boom")
	err := Forward(bytes.NewReader(greeting(3, "NULL")), failWriter{boom}, testProps, testLimits, Drops{})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the write's", err)
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

// What Forward hands to libzmq, whatever the peer sends, is a ZMTP 3 stream of the NULL
// mechanism whose READY carries the forwarder's properties once each (the peer cannot set them) and whose messages are
// whole and within the limits; it ends at a message's boundary.
func FuzzForward(f *testing.F) {
	hello := cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH"))
	f.Add(cat(hello, msg([]byte("a")), msg(many(3, 300)...)))
	f.Add(cat(hello, msg(many(5, 1)...), msg([]byte("b"))))
	f.Add(cat(greeting(3, "NULL"), ready("Socket-Type", "REQ", PeerProperty, "6.6.6.6", "Identity", "x"), frame(flagMore, nil), frame(0, []byte("req"))))
	f.Add(cat(hello, frame(flagMore, []byte("a")), frame(flagCommand, []byte("\x04PING\x00\x01")), frame(0, nil)))
	f.Add(cat(hello, []byte{flagLong, 0, 0, 0, 0, 0, 0, 3, 0xe8}))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		var charged, dropped, cmds int64
		err := Forward(bytes.NewReader(in), &out, testProps, testLimits, Drops{
			Commands: func(n int64) error {
				if n < 2 || n > CommandChargeBytes+9+MaxCommandBytes {
					t.Fatalf("commands charged %d bytes at once", n)
				}
				cmds += n
				return nil
			},
			Charge: func(n int64) error {
				if n < 2 || n > testLimits.FrameBytes+testLimits.MessageBytes+9*int64(testLimits.MessageFrames+1) {
					t.Fatalf("charged %d bytes at once", n)
				}
				charged += n
				return nil
			},
			Dropped: func(d Drop) {
				if d.Wire < d.Bytes+2*int64(d.Frames) {
					t.Fatalf("dropped %+v: fewer wire bytes than its frames and headers", d)
				}
				dropped += d.Wire
			},
		})
		if err == nil && !bytes.HasPrefix(in, out.Bytes()[:min(len(out.Bytes()), greetingBytes)]) {
			t.Fatal("greeting altered")
		}
		if err == nil && charged != dropped || charged < dropped {
			t.Fatalf("charged %d bytes for dropped messages of %d (err %v)", charged, dropped, err)
		}
		if want := commandWire(in); err == nil && cmds != want || cmds > want {
			t.Fatalf("charged %d bytes for commands of %d (err %v)", cmds, want, err)
		}
		checkForwarded(t, out.Bytes())
	})
}

// commandWire is the charge of the command frames after the first in a stream (its
// greeting skipped): their wire bytes as their headers announce them, at least
// CommandMinChargeBytes each, up to where the stream ends or is cut,
// independently of Forward's code.
func commandWire(in []byte) int64 {
	if len(in) < greetingBytes {
		return 0
	}
	p := in[greetingBytes:]
	var sum int64
	for first := true; len(p) > 0; first = false {
		fl, head, n := p[0], uint64(2), uint64(0)
		if fl&flagLong != 0 {
			if len(p) < 9 {
				break
			}
			head, n = 9, binary.BigEndian.Uint64(p[1:9])
		} else {
			if len(p) < 2 {
				break
			}
			n = uint64(p[1])
		}
		if fl&flagCommand != 0 && !first {
			sum += max(int64(head+min(n, 1<<40)), CommandMinChargeBytes)
		}
		if n > uint64(len(p))-head {
			break
		}
		p = p[head+n:]
	}
	return sum
}

// checkForwarded parses what Forward wrote, independently of its code.
func checkForwarded(t *testing.T, b []byte) {
	t.Helper()
	if len(b) < greetingBytes {
		return // ended within the greeting: libzmq got at most a prefix
	}
	g := b[:greetingBytes]
	if g[0] != 0xff || g[9]&1 != 1 || g[10] < 3 || string(g[12:16]) != "NULL" || bytes.Count(g[16:32], []byte{0}) != 16 {
		t.Fatalf("greeting forwarded: % x", g)
	}
	r := bytes.NewReader(b[greetingBytes:])
	next := func() (flags byte, body []byte, ok bool) {
		fl, err := r.ReadByte()
		if err == io.EOF {
			return 0, nil, false
		}
		var n uint64
		if fl&flagLong != 0 {
			var s [8]byte
			if _, err := io.ReadFull(r, s[:]); err != nil {
				t.Fatalf("cut frame size")
			}
			n = binary.BigEndian.Uint64(s[:])
		} else {
			c, err := r.ReadByte()
			if err != nil {
				t.Fatalf("cut frame size")
			}
			n = uint64(c)
		}
		if n > uint64(r.Len()) {
			t.Fatalf("frame of %d bytes, %d left", n, r.Len())
		}
		body = make([]byte, n)
		io.ReadFull(r, body)
		return fl, body, true
	}
	fl, body, ok := next()
	if !ok {
		return
	}
	if fl != flagCommand || !bytes.HasPrefix(body, []byte("\x05READY")) {
		t.Fatalf("first frame %#x %q, want READY", fl, body)
	}
	p, seen := body[6:], map[string]int{}
	for len(p) > 0 {
		n := int(p[0])
		name := string(p[1 : 1+n])
		vn := int(binary.BigEndian.Uint32(p[1+n:]))
		val := string(p[5+n : 5+n+vn])
		p = p[5+n+vn:]
		for _, tp := range testProps {
			if equalFold([]byte(name), tp.Name) {
				seen[tp.Name]++
				if name != tp.Name || val != tp.Value {
					t.Fatalf("forwarder's property %s=%q, want %s=%q", name, val, tp.Name, tp.Value)
				}
			}
		}
	}
	for _, tp := range testProps {
		if seen[tp.Name] != 1 {
			t.Fatalf("READY carries %s %d times", tp.Name, seen[tp.Name])
		}
	}
	frames, size := 0, 0
	for {
		fl, body, ok := next()
		if !ok {
			break
		}
		if fl&flagCommand != 0 {
			if len(body) > MaxCommandBytes {
				t.Fatalf("command of %d bytes", len(body))
			}
			continue
		}
		frames++
		size += len(body)
		if frames > testLimits.MessageFrames || int64(size) > testLimits.MessageBytes {
			t.Fatalf("message of %d frames, %d bytes forwarded", frames, size)
		}
		if fl&flagMore == 0 {
			frames, size = 0, 0
		}
	}
	if frames != 0 {
		t.Fatalf("forwarded stream ends within a message")
	}
}
