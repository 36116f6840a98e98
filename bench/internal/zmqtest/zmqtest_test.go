package zmqtest

import (
	"net"
	"testing"

	zmq "github.com/pebbe/zmq4"
)

func TestPullReceivesWhatIsPushedToItsAddress(t *testing.T) {
	pull, addr := Pull(t)
	if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
		t.Fatalf("address %q (%v), want 127.0.0.1:port", addr, err)
	}
	push, err := zmq.NewSocket(zmq.PUSH)
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	if err := push.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := push.Connect("tcp://" + addr); err != nil {
		t.Fatal(err)
	}
	if _, err := push.SendMessage("a", "b"); err != nil {
		t.Fatal(err)
	}
	got, err := pull.RecvMessage(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("received %q, want [a b]", got)
	}
}

func TestPullTimesOutRatherThanHangs(t *testing.T) {
	pull, _ := Pull(t)
	timeout, err := pull.GetRcvtimeo()
	if err != nil {
		t.Fatal(err)
	}
	if timeout != RecvTimeout {
		t.Errorf("receive timeout %v, want %v", timeout, RecvTimeout)
	}
}
