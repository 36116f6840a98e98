package lmcache

import (
	"slices"
	"strings"
	"sync"
	"testing"

	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// payloads records the last frame of every message the controller hands to Ingest.
type payloads struct {
	mu   sync.Mutex
	seen []string
}

func (p *payloads) ingest(_ string, frames [][]byte, apply func() bool) {
	p.mu.Lock()
	p.seen = append(p.seen, string(frames[len(frames)-1]))
	p.mu.Unlock()
	apply()
}

func (p *payloads) saw(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.seen, s)
}

// A peer IP holds at most MaxPeerConns connections to a socket: a real peer's next PUSH
// socket is ended each time it connects (counted and logged), its queued message never
// arrives, and it gets in once one of the IP's connections closes.
func TestServerCapsConnectionsPerPeerIP(t *testing.T) {
	for _, allow := range []AllowMode{AllowFleet, AllowAny} {
		t.Run(allow.String(), func(t *testing.T) {
			noLeaks(t)
			const max = 2
			got := &payloads{}
			ls := startServer(t, ServerConfig{PeerRate: -1, Allow: allow, MaxPeerConns: max, Ingest: got.ingest}, []string{"127.0.0.1"})
			var held []*zmq.Socket
			for i := range max {
				so := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
				held = append(held, so)
				msg := "held-" + string(rune('0'+i))
				sendFrames(t, so, [][]byte{[]byte(msg)})
				eventually(t, msg, func() bool { return got.saw(msg) })
			}
			// The next socket's message waits in its queue for a connection that is kept;
			// each of its connections (it connects again every 100 ms) is ended.
			extra := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
			sendFrames(t, extra, [][]byte{[]byte("extra")})
			eventually(t, "three connections of the extra socket ended", func() bool {
				return testutil.ToFloat64(ls.connsRefused) >= 3
			})
			if got.saw("extra") {
				t.Fatalf("a message over a connection past the IP's %d arrived", max)
			}
			if !strings.Contains(ls.logs.String(), "raise --lmcache-max-peer-conns") ||
				!strings.Contains(ls.logs.String(), "socket=pull") {
				t.Errorf("no WARN line naming the socket and the flag: %s", ls.logs.String())
			}
			held[0].Close()
			eventually(t, "the extra socket's message once a connection closed", func() bool { return got.saw("extra") })
			held[1].Close()
			extra.Close()
			ls.closePeers(t)
		})
	}
}

// ZMQ_MAXMSGSIZE in the linked libzmq bounds a frame, not a message: without the front
// (Direct) a message of three frames at the cap (three times the cap in all) arrives whole.
// The front bounds the message: it drops it (counted, logged) before libzmq holds it, and
// the peer's next message arrives.
func TestServerFrameCapBoundsTheMessage(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "front", true: "direct"}[direct], func(t *testing.T) {
			noLeaks(t)
			const frame = 4 << 10
			seen := &seenFrames{}
			ls := startServer(t, ServerConfig{PeerRate: -1, MaxFrameBytes: frame, Direct: direct, Ingest: seen.ingest}, []string{"127.0.0.1"})
			push := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
			sendFrames(t, push, repeatFrames(3, frame))
			sendFrames(t, push, [][]byte{[]byte("after")})
			eventually(t, "the message after", func() bool { return seen.sawLast("after") })
			frames, largest := seen.largest()
			if direct && (frames != 3 || largest != frame) {
				t.Errorf("direct: largest message %d frames of at most %d bytes, want 3 of %d (libzmq's cap is a frame's)", frames, largest, frame)
			}
			if !direct {
				if frames != 1 || testutil.ToFloat64(ls.bigMsgs) != 1 {
					t.Errorf("front: largest message %d frames, %v counted dropped; want the three-frame message dropped", frames, testutil.ToFloat64(ls.bigMsgs))
				}
				if !strings.Contains(ls.logs.String(), "dropped a message of more bytes than --lmcache-max-frame-bytes") {
					t.Errorf("no WARN line for the dropped message: %s", ls.logs.String())
				}
			}
			push.Close()
			ls.closePeers(t)
		})
	}
}

func TestPeerConnsCounts(t *testing.T) {
	c := newPeerConns(2)
	for i, tt := range []struct {
		open bool
		fd   int
		ip   string
		over bool
	}{
		{true, 10, "10.0.0.1", false},
		{true, 11, "10.0.0.1", false},
		{true, 12, "10.0.0.1", true},
		{true, 13, "10.0.0.2", false},
		{false, 12, "", false},
		{false, 99, "", false},        // unknown: ignored
		{true, 11, "10.0.0.2", false}, // a reused descriptor whose close was not seen
		{true, 14, "10.0.0.1", false},
		{true, 15, "10.0.0.1", true},
	} {
		if !tt.open {
			c.close(tt.fd)
			continue
		}
		if over := c.open(tt.fd, tt.ip); over != tt.over {
			t.Errorf("step %d: open(%d, %s) over = %v, want %v (counts %v)", i, tt.fd, tt.ip, over, tt.over, c.byIP)
		}
	}
	for _, fd := range []int{10, 11, 13, 14, 15} {
		c.close(fd)
	}
	if len(c.byIP) != 0 || len(c.byFD) != 0 {
		t.Errorf("after every close: %v %v, want empty", c.byIP, c.byFD)
	}
}
