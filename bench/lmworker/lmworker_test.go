package lmworker

import (
	"strings"
	"testing"

	zmq "github.com/pebbe/zmq4"
)

func TestDialConnectsFromTheEngineIP(t *testing.T) {
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
	if err := pull.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ep, err := pull.GetLastEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	wctx, push, err := Dial("127.0.3.4", strings.TrimPrefix(ep, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer wctx.Term()
	defer push.Close()
	if _, err := push.SendBytes([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	msg, md, err := pull.RecvBytesWithMetadata(0, "Peer-Address")
	if err != nil {
		t.Fatal(err)
	}
	if string(msg) != "hello" || md["Peer-Address"] != "127.0.3.4" {
		t.Errorf("received %q from %q, want hello from 127.0.3.4", msg, md["Peer-Address"])
	}
}

func TestDialRefusesAnAddressThatIsNotLocal(t *testing.T) {
	for _, ip := range []string{"192.0.2.1", "::1", "engine-0", ""} {
		if _, _, err := Dial(ip, "127.0.0.1:9"); err == nil || !strings.Contains(err.Error(), "127.0.0.0/8") {
			t.Errorf("Dial(%q): %v, want an error naming loopback", ip, err)
		}
	}
}
