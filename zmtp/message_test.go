package zmtp

import (
	"bytes"
	"io"
	"testing"
)

// A message's buffer never grows past what a message within the Limits encodes to, whatever
// its frames' sizes (growth by doubling would overshoot it), and a large one goes back to
// the pool when the message is handed on, the connection keeping its small one.
func TestMessageBufferBounded(t *testing.T) {
	lim := Limits{FrameBytes: 256 << 10, MessageBytes: 256 << 10, MessageFrames: 64}
	most := int(lim.MessageBytes) + 9*lim.MessageFrames
	for _, tt := range []struct {
		name         string
		frames, size int
	}{
		{"one frame at the bound", 1, 256 << 10},
		{"64 frames of 4 KiB", 64, 4 << 10},
		{"64 frames of 4,000 bytes", 64, 4000},
		{"3 frames of 70,000 bytes", 3, 70000},
		{"small", 50, 60},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newMessage(lim)
			b := m.small
			for range tt.frames { // as Forward appends a frame
				need := len(b) + int(headerBytes(frameFlags(tt.size))) + tt.size
				if need > cap(b) {
					b = m.grow(b, need)
				}
				b = b[:need]
			}
			head := 2
			if tt.size > 255 {
				head = 9
			}
			if want := tt.frames * (head + tt.size); len(b) != want {
				t.Errorf("encoded %d bytes, want %d", len(b), want)
			}
			if cap(b) > max(most, smallMessageBytes) {
				t.Errorf("buffer of %d bytes, over the %d a message within the limits encodes to", cap(b), most)
			}
			if b = m.reset(b); cap(b) != smallMessageBytes || len(b) != 0 {
				t.Errorf("after reset: len %d cap %d, want the small buffer empty", len(b), cap(b))
			}
		})
	}
}

func frameFlags(size int) byte {
	if size > 255 {
		return flagLong
	}
	return 0
}

// Back-to-back large messages reuse one buffer: Forward's allocations do not grow with
// their count.
func TestForwardReusesLargeBuffers(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers at random")
	}
	lim := Limits{FrameBytes: 256 << 10, MessageBytes: 256 << 10, MessageFrames: 64}
	for _, tt := range []struct {
		name         string
		frames, size int
	}{
		{"one frame of 200 KiB", 1, 200 << 10},
		{"60 frames of 4 KiB", 60, 4 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH"), bytes.Repeat(msg(many(tt.frames, tt.size)...), 50))
			run := func(in []byte) float64 {
				return testing.AllocsPerRun(5, func() {
					if err := Forward(bytes.NewReader(in), io.Discard, testProps, lim, Drops{}); err != nil {
						t.Fatal(err)
					}
				})
			}
			none := run(cat(greeting(3, "NULL"), ready("Socket-Type", "PUSH")))
			// the pool may be emptied by a collection once in a while: a few allocations
			if got := run(in); got > none+4 {
				t.Errorf("Forward of 50 messages allocates %v objects, without them %v: a message's buffer is not reused", got, none)
			}
		})
	}
}
