package lmworker

import (
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/internal/zmqtest"
)

func TestDialConnectsFromTheEngineIP(t *testing.T) {
	pull, addr := zmqtest.Pull(t)
	wctx, push, err := Dial("127.0.3.4", addr)
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
