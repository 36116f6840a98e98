package lmcache

import (
	"net"
	"strings"
	"testing"

	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A peer that does not speak ZMTP 3 with the NULL mechanism, or sends a frame over the cap,
// has its connection ended by the front: counted by reason and logged with what to do; the
// socket serves the next peer.
func TestFrontCutsBrokenPeers(t *testing.T) {
	noLeaks(t)
	seen := &seenFrames{}
	ls := startServer(t, ServerConfig{PeerRate: -1, Allow: AllowAny, Ingest: seen.ingest}, nil)
	c, err := net.Dial("tcp", ls.PullAddr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// The count is taken before the line is logged: wait for both.
	eventually(t, "the HTTP peer cut", func() bool {
		return testutil.ToFloat64(ls.connsCut.WithLabelValues("protocol")) == 1 && strings.Contains(ls.logs.String(), "reason=protocol")
	})
	c.Close()

	push := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
	sendFrames(t, push, repeatFrames(1, DefaultMaxFrameBytes+1))
	eventually(t, "the oversized frame's connection cut", func() bool {
		return testutil.ToFloat64(ls.connsCut.WithLabelValues("frame_cap")) >= 1 && strings.Contains(ls.logs.String(), "reason=frame_cap")
	})
	for _, s := range []string{"did not speak ZMTP 3", "reason=protocol", "reason=frame_cap", "raise --lmcache-max-frame-bytes"} {
		if !strings.Contains(ls.logs.String(), s) {
			t.Errorf("logs lack %q: %s", s, ls.logs.String())
		}
	}
	sendFrames(t, push, [][]byte{[]byte("after")})
	eventually(t, "a message after", func() bool { return seen.sawLast("after") })
	push.Close()
	ls.closePeers(t)
}

// A message of many frames, each under the cap, is dropped by the front before libzmq holds
// it, whatever its size in all; the peer's connection stays and its next message arrives.
func TestFrontDropsManyFrameMessages(t *testing.T) {
	noLeaks(t)
	seen := &seenFrames{}
	ls := startServer(t, ServerConfig{PeerRate: -1, Ingest: seen.ingest}, []string{"127.0.0.1"})
	push := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
	sendFrames(t, push, repeatFrames(40, DefaultMaxFrameBytes)) // 10 MiB of frames at the cap
	sendFrames(t, push, repeatFrames(50, 60))                   // a worker's batch
	eventually(t, "the batch after", func() bool { return seen.count() == 1 })
	if frames, largest := seen.largest(); frames != 50 || largest != 60 {
		t.Errorf("largest message handed on: %d frames, largest %d bytes; want the batch of 50 x 60", frames, largest)
	}
	if got := testutil.ToFloat64(ls.bigMsgs); got != 1 {
		t.Errorf("counted %v big messages, want 1", got)
	}
	if got := testutil.ToFloat64(ls.connsCut.WithLabelValues("frame_cap")); got != 0 {
		t.Errorf("the connection was cut (%v); a message of frames under the cap is dropped, not cut", got)
	}
	push.Close()
	ls.closePeers(t)
}

// A process that reaches libzmq's socket behind the front directly (the abstract Unix socket
// is open to the pod's network namespace) is refused: without the front's key its messages
// have no peer.
func TestFrontKeyRefusesBypass(t *testing.T) {
	noLeaks(t)
	ls := startServer(t, ServerConfig{PeerRate: -1}, []string{"127.0.0.1"})
	push := ls.socket(t, zmq.PUSH, "ipc://"+ls.fronts[0].inner)
	sendFrames(t, push, [][]byte{mustEncode(t, regMsg("bypass", 0, "127.0.0.1"))})
	eventually(t, "the message past the front refused", func() bool {
		return strings.Contains(ls.logs.String(), "did not come through the ZMTP front")
	})
	for _, info := range ls.idx.Instances() {
		if info.ID == "bypass" {
			t.Fatalf("a message past the front without its key was applied: %+v", info)
		}
	}
	push.Close()
	ls.closePeers(t)
}

// A message's peer behind the front is the front's peer property only with the front's key.
func TestPeerIDOf(t *testing.T) {
	front := peerID{props: []string{peerProperty, keyProperty}, key: "k"}
	direct := peerID{props: []string{"Peer-Address"}}
	for _, tt := range []struct {
		id   peerID
		md   map[string]string
		want string
	}{
		{front, map[string]string{peerProperty: "10.0.0.1", keyProperty: "k"}, "10.0.0.1"},
		{front, map[string]string{peerProperty: "10.0.0.1", keyProperty: "guess"}, ""},
		{front, map[string]string{peerProperty: "10.0.0.1"}, ""},
		{front, map[string]string{"Peer-Address": "10.0.0.1", keyProperty: "k"}, ""},
		{direct, map[string]string{"Peer-Address": "10.0.0.1", peerProperty: "6.6.6.6"}, "10.0.0.1"},
		{direct, map[string]string{}, ""},
	} {
		if got := tt.id.of(tt.md); got != tt.want {
			t.Errorf("%+v.of(%v) = %q, want %q", tt.id, tt.md, got, tt.want)
		}
	}
}
