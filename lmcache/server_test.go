package lmcache

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/loadaware/loadaware-epp/internal/testlog"
)

type liveServer struct {
	*Server
	idx  *Index
	logs *testlog.Buffer
	zctx *zmq.Context
}

func startServer(t *testing.T, cfg ServerConfig, allowed []string) *liveServer {
	t.Helper()
	if cfg.PullAddr == "" {
		cfg.PullAddr = "127.0.0.1:0"
	}
	if cfg.ReplyAddr == "" {
		cfg.ReplyAddr = "127.0.0.1:0"
	}
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	reg := prometheus.NewPedanticRegistry()
	idx := newTestIndex(t, IndexConfig{Logger: log, Registerer: reg})
	srv, err := NewServer(cfg, idx, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetAllowedIPs(allowed)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	ls := &liveServer{Server: srv, idx: idx, logs: logs, zctx: zctx}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ls
}

// closePeers ends the test's client context (its sockets must be closed first).
func (ls *liveServer) closePeers(t *testing.T) {
	if err := ls.zctx.Term(); err != nil {
		t.Errorf("client context: %v", err)
	}
}

func (ls *liveServer) socket(t *testing.T, kind zmq.Type, endpoint string) *zmq.Socket {
	t.Helper()
	so, err := ls.zctx.NewSocket(kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := so.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := so.SetRcvtimeo(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := so.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	return so
}

// noLeaks checks, after every later cleanup (the server's Close) ran, that no goroutine
// of the test is left.
func noLeaks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

// eventually polls cond until it holds or 10 s pass: the server offers no signal for
// "this pushed message was applied", so the test watches its effect.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func encodeAll(t *testing.T, msgs []Message) [][]byte {
	var out [][]byte
	for _, m := range msgs {
		out = append(out, mustEncode(t, m))
	}
	return out
}

func TestServerPullIngestsBatchesAndSkipsGarbage(t *testing.T) {
	noLeaks(t)
	ls := startServer(t, ServerConfig{Allow: AllowAny}, nil)
	push := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
	p := prompt(7, 1578)
	// A 0.3.9 worker: register, then admits for the prompt's chunks, all in one batch, with
	// garbage interleaved.
	batch := encodeAll(t, cat(regMsg("vllm-0", 0, "10.0.0.7"), admits(t, "vllm-0", 0, "LocalCPUBackend", p, 0, 4)))
	garbage := [][]byte{{0xc1}, []byte(`{"type":"KVAdmitMsg"`), mustEncode(t, ErrorMsg{Error: "x"}), unhex(t, `81 a4 "type" a4 "Nope"`)}
	var frames [][]byte
	for i, f := range batch {
		frames = append(frames, f)
		if i < len(garbage) {
			frames = append(frames, garbage[i])
		}
	}
	if _, err := push.SendMessage(frames); err != nil {
		t.Fatal(err)
	}
	want := []Match{{InstanceID: "vllm-0", IP: "10.0.0.7", Tokens: 1024, HolderRank: 0}}
	eventually(t, "the pushed admits", func() bool { return cmp.Equal(ls.idx.Lookup(p), want) })
	// A second batch in the newer shape completes the prompt.
	h := ls.idx.Hasher().ChunkKeys(p)
	b := BatchedKVOperationMsg{InstanceID: "vllm-0", Location: "LocalCPUBackend"}
	for i, k := range h[4:] {
		b.Operations = append(b.Operations, KVOp{Op: OpAdmit, Key: k, SeqNum: int64(i)})
	}
	if _, err := push.SendMessage(mustEncode(t, b)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the batched admits", func() bool { return len(ls.idx.Lookup(p)) == 1 && ls.idx.Lookup(p)[0].Tokens == 1578 })
	// An instance that never registered (a 0.3.9 worker started before this picker) is
	// mapped to the IP its connection comes from.
	q := prompt(8, 300)
	if _, err := push.SendMessage(encodeAll(t, admits(t, "silent-0", 0, "LocalCPUBackend", q, 0, 2))); err != nil {
		t.Fatal(err)
	}
	wantQ := []Match{{InstanceID: "silent-0", IP: "127.0.0.1", Tokens: 300, HolderRank: 0}}
	eventually(t, "the unregistered instance's admits", func() bool { return cmp.Equal(ls.idx.Lookup(q), wantQ) })
	met := ls.idx.met
	for name, c := range map[string]struct {
		c    prometheus.Collector
		want float64
	}{
		"malformed": {met.invalid[KindMalformed], 2}, "unknown type": {met.invalid[KindUnknownType], 1},
		"admits applied": {met.ops[0][0], 9}, "reply type pushed": {met.messages["other"][1], 1},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", name, got, c.want)
		}
	}
	push.Close()
	ls.closePeers(t)
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestServerAnswersDealerAndReqPeers(t *testing.T) {
	noLeaks(t)
	ls := startServer(t, ServerConfig{Allow: AllowAny, HeartbeatAddr: "127.0.0.1:0"}, nil)
	hbURL := ls.HeartbeatAddr()
	wantRegRet := mustEncode(t, RegisterRetMsg{ExtraConfig: map[string]string{"heartbeat_url": hbURL}})
	register := mustEncode(t, RegisterMsg{InstanceID: "new-0", IP: "10.0.0.8", Port: 8001})

	// A newer worker: DEALER, ["", payload] each way.
	dealer := ls.socket(t, zmq.DEALER, "tcp://"+ls.ReplyAddr())
	if _, err := dealer.SendMessage("", register); err != nil {
		t.Fatal(err)
	}
	got, err := dealer.RecvMessageBytes(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[0]) != 0 || !bytes.Equal(got[1], wantRegRet) {
		t.Fatalf("DEALER got %q, want [\"\", % x]", got, wantRegRet)
	}
	// ... then heartbeats on the dedicated socket it was told about.
	hb := ls.socket(t, zmq.DEALER, "tcp://"+hbURL)
	if _, err := hb.SendMessage("", mustEncode(t, HeartbeatMsg{InstanceID: "new-0", IP: "10.0.0.8"})); err != nil {
		t.Fatal(err)
	}
	if got, err = hb.RecvMessageBytes(0); err != nil || !bytes.Equal(got[len(got)-1], unhex(t, specHeartbeatRet)) {
		t.Fatalf("heartbeat reply %q, %v", got, err)
	}

	// An LMCache 0.3.10-style worker: REQ, one frame each way; garbage gets an ErrorMsg so
	// the REQ socket is never stuck.
	req := ls.socket(t, zmq.REQ, "tcp://"+ls.ReplyAddr())
	exchanges := []struct {
		send    []byte
		wantTag string
	}{
		{mustEncode(t, RegisterMsg{InstanceID: "old-0", WorkerID: 0, IP: "10.0.0.9", Port: 8001, DistributedURL: ptr("h:1")}), "RegisterRetMsg"},
		{mustEncode(t, HeartbeatMsg{InstanceID: "old-0", IP: "10.0.0.9"}), "HeartbeatRetMsg"},
		{[]byte{0xc1}, "ErrorMsg"},
		{unhex(t, `81 a4 "type" b0 "FullSyncStartMsg"`), "ErrorMsg"},
		{mustEncode(t, KVAdmitMsg{InstanceID: "old-0", Key: 1}), "ErrorMsg"},
	}
	for _, ex := range exchanges {
		if _, err := req.SendBytes(ex.send, 0); err != nil {
			t.Fatal(err)
		}
		b, err := req.RecvBytes(0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Decode(b)
		if err != nil || m.Tag() != ex.wantTag {
			t.Fatalf("REQ reply to % x = %#v, %v; want a %s", ex.send, m, err, ex.wantTag)
		}
	}
	byIP := ls.idx.InstancesByIP()
	if len(byIP["10.0.0.8"]) != 1 || !byIP["10.0.0.8"][0].Heartbeats || len(byIP["10.0.0.9"]) != 1 || byIP["10.0.0.9"][0].Keys != 1 {
		t.Fatalf("registry after the requests: %+v", byIP)
	}
	for _, so := range []*zmq.Socket{dealer, hb, req} {
		so.Close()
	}
	ls.closePeers(t)
}

func TestServerRegisterRetWithoutHeartbeatIsTheSpecBytes(t *testing.T) {
	noLeaks(t)
	ls := startServer(t, ServerConfig{Allow: AllowAny}, nil)
	req := ls.socket(t, zmq.REQ, "tcp://"+ls.ReplyAddr())
	if _, err := req.SendBytes(unhex(t, specRegister), 0); err != nil {
		t.Fatal(err)
	}
	b, err := req.RecvBytes(0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, unhex(t, specRegisterRet)) {
		t.Fatalf("reply % x, want the spec's RegisterRetMsg", b)
	}
	req.Close()
	ls.closePeers(t)
}

func TestServerRefusesPeersOutsideTheFleet(t *testing.T) {
	noLeaks(t)
	// Only 127.0.0.2 is a fleet IP; the server listens on 127.0.0.1.
	ls := startServer(t, ServerConfig{}, []string{"127.0.0.2:8000", "engine.example"})
	p := prompt(3, 600)
	outsider := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr()) // source 127.0.0.1
	if _, err := outsider.SendMessage(encodeAll(t, cat(regMsg("intruder", 0, "10.9.9.9"), admits(t, "intruder", 0, "cpu", p, 0, 3)))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a refused connection", func() bool { return testutil.ToFloat64(ls.rejected) >= 1 })

	member := ls.socket(t, zmq.PUSH, "tcp://127.0.0.2:0;"+ls.PullAddr()) // source 127.0.0.2
	if _, err := member.SendMessage(encodeAll(t, cat(regMsg("engine", 0, "127.0.0.2"), admits(t, "engine", 0, "cpu", p, 0, 3)))); err != nil {
		t.Fatal(err)
	}
	want := []Match{{InstanceID: "engine", IP: "127.0.0.2", Tokens: 600, HolderRank: 0}}
	eventually(t, "the fleet member's admits", func() bool { return cmp.Equal(ls.idx.Lookup(p), want) })
	for _, info := range ls.idx.Instances() {
		if info.ID == "intruder" {
			t.Fatalf("a refused peer's messages reached the index: %+v", info)
		}
	}
	logs := ls.logs.String()
	for _, s := range []string{"refused a connection", "peer=127.0.0.1", "engine.example"} {
		if !strings.Contains(logs, s) {
			t.Errorf("logs lack %q:\n%s", s, logs)
		}
	}
	outsider.Close()
	member.Close()
	ls.closePeers(t)
}

func TestServerStopsWithItsContext(t *testing.T) {
	noLeaks(t)
	idx := newTestIndex(t, IndexConfig{})
	srv, err := NewServer(ServerConfig{PullAddr: "127.0.0.1:0", Allow: AllowAny}, idx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.ReplyAddr() != "" || srv.HeartbeatAddr() != "" || !strings.HasPrefix(srv.PullAddr(), "127.0.0.1:") {
		t.Fatalf("addresses: pull %q reply %q heartbeat %q", srv.PullAddr(), srv.ReplyAddr(), srv.HeartbeatAddr())
	}
	cancel()
	eventually(t, "the server to stop", func() bool {
		select {
		case <-srv.done:
			return true
		default:
			return false
		}
	})
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err == nil {
		t.Fatal("a closed server started again")
	}
}

func TestServerConfigErrors(t *testing.T) {
	noLeaks(t)
	idx := newTestIndex(t, IndexConfig{})
	if _, err := NewServer(ServerConfig{}, idx, nil, nil); err == nil {
		t.Error("NewServer without a pull address succeeded")
	}
	if _, err := NewServer(ServerConfig{PullAddr: ":1"}, nil, nil, nil); err == nil {
		t.Error("NewServer without an index succeeded")
	}
	for _, addr := range []string{"nonsense", "127.0.0.1:notaport"} {
		srv, err := NewServer(ServerConfig{PullAddr: addr, Allow: AllowAny}, idx, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(context.Background()); err == nil {
			srv.Close()
			t.Errorf("Start with pull address %q succeeded", addr)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("Close after a failed Start: %v", err)
		}
	}
	// A port already bound.
	a := startServer(t, ServerConfig{Allow: AllowAny}, nil)
	srv, err := NewServer(ServerConfig{PullAddr: a.PullAddr(), Allow: AllowAny}, idx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err == nil {
		t.Errorf("Start on a bound port: %v", err)
	}
	a.closePeers(t)
}

func TestParseAllowMode(t *testing.T) {
	for in, want := range map[string]AllowMode{"fleet": AllowFleet, "any": AllowAny} {
		if got, err := ParseAllowMode(in); err != nil || got != want || got.String() != in {
			t.Errorf("ParseAllowMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseAllowMode("all"); err == nil {
		t.Error("ParseAllowMode(all) succeeded")
	}
}
