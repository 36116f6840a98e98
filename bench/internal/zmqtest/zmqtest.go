// Package zmqtest holds the bench tests' one ZeroMQ PULL socket: the stand-in
// for a KV-event collector that a test points an engine or a feeder at. It is
// for tests only and does no decoding; each test reads the frames it expects.
package zmqtest

import (
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// RecvTimeout bounds each receive on a Pull socket, so a message that never
// comes fails the test instead of hanging it.
const RecvTimeout = 10 * time.Second

// Pull binds a PULL socket on a free loopback port and returns it with the
// address (host:port, no scheme) to push to. Receives time out after
// RecvTimeout; the socket and its context close when t's test ends. Any
// failure to set it up fails t.
func Pull(t testing.TB) (*zmq.Socket, string) {
	t.Helper()
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	so, err := zctx.NewSocket(zmq.PULL)
	if err != nil {
		_ = zctx.Term()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		so.Close()
		_ = zctx.Term()
	})
	if err := so.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := so.SetRcvtimeo(RecvTimeout); err != nil {
		t.Fatal(err)
	}
	if err := so.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ep, err := so.GetLastEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	return so, strings.TrimPrefix(ep, "tcp://")
}
