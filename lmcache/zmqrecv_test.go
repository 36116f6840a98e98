package lmcache

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/zmqwait"
	zmq "github.com/pebbe/zmq4"
)

// TestReceiverReadsWhatWasSent: whole messages come out as they were sent, frame by frame,
// whether a frame fits the scratch buffer or not, empty ones included, with the peer's
// address; an empty queue is EAGAIN, as zmq4 says it; a closed socket has no handle.
func TestReceiverReadsWhatWasSent(t *testing.T) {
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer zctx.Term()
	pull, err := zctx.NewSocket(zmq.PULL)
	if err != nil {
		t.Fatal(err)
	}
	defer pull.Close()
	for _, set := range []func() error{func() error { return pull.SetLinger(0) }, func() error { return pull.SetRcvtimeo(10 * time.Second) },
		func() error { return pull.Bind("tcp://127.0.0.1:*") }} {
		if err := set(); err != nil {
			t.Fatal(err)
		}
	}
	ep, err := pull.GetLastEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	push, err := zctx.NewSocket(zmq.PUSH)
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	if err := push.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := push.Connect(ep); err != nil {
		t.Fatal(err)
	}
	r, err := newReceiver(pull)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789"), 1000) // over scratchBytes: taken in a second call
	fifty := make([][]byte, 50)
	for i := range fifty {
		fifty[i] = []byte{byte(i), 'x'}
	}
	for _, c := range []struct {
		name   string
		frames [][]byte
	}{
		{"one frame", [][]byte{[]byte("a")}},
		{"an empty frame between two", [][]byte{[]byte("a"), {}, []byte("b")}},
		{"a frame over the scratch buffer, then a small one", [][]byte{big, []byte("tail")}},
		{"exactly the scratch buffer", [][]byte{big[:scratchBytes]}},
		{"fifty frames", fifty},
	} {
		if _, err := push.SendMessage(c.frames); err != nil {
			t.Fatal(err)
		}
		got, peer, err := r.recvPeer(0, nil) // blocking, with the socket's receive timeout
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(got) != len(c.frames) {
			t.Fatalf("%s: %d frames, want %d", c.name, len(got), len(c.frames))
		}
		for i := range got {
			if !bytes.Equal(got[i], c.frames[i]) {
				t.Errorf("%s: frame %d is %d bytes %.20q, want %d bytes %.20q", c.name, i, len(got[i]), got[i], len(c.frames[i]), c.frames[i])
			}
		}
		if len(got) > 1 && len(got[0]) > 0 && &got[0][0] == &got[len(got)-1][0] {
			t.Errorf("%s: frames share memory", c.name)
		}
		if peer != "127.0.0.1" {
			t.Errorf("%s: peer %q, want 127.0.0.1", c.name, peer)
		}
	}
	if _, _, err := r.recvPeer(zmq.DONTWAIT, nil); !zmqwait.IsAgain(err) {
		t.Errorf("an empty queue without waiting: %v; want EAGAIN", err)
	}
	if err := pull.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := newReceiver(pull); !errors.Is(err, errNoHandle) {
		t.Errorf("a closed socket's receiver: %v; want %v", err, errNoHandle)
	}
}
