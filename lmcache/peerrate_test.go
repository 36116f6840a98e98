package lmcache

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loadaware/loadaware-epp/zmtp"
)

func TestPeerLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newPeerLimiter(1000, 2000) // 1,000 bytes/s, 2,000 at once
	for i, step := range []struct {
		ip    string
		at    time.Duration
		n     int
		wait  time.Duration
		apply bool
	}{
		{"a", 0, 2000, 0, true},                        // the burst
		{"a", 0, 10, 10 * time.Millisecond, true},      // 10 bytes of debt: 10 ms
		{"b", 0, 2000, 0, true},                        // another IP has its own bucket
		{"a", 0, 1990, maxPeerWait, true},              // 2,000 of debt: the wait is capped
		{"a", 0, 1, maxPeerWait, false},                // deeper than the burst: dropped, paced
		{"a", 2 * time.Second, 500, maxPeerWait, true}, // repaid, then 500 of debt
		{"a", time.Hour, 2000, 0, true},                // refilled to the burst, no more
		{"a", time.Hour, 1, time.Millisecond, true},    // the bucket did not grow past it
		{"c", 0, 4001, maxPeerWait, false},             // larger than burst and debt together
		{"c", 0, 4000, maxPeerWait, true},              // exactly the burst and the debt
		{"d", 0, 0, 0, true},                           // an empty message is free
		{"d", 3 * time.Millisecond, 2001, time.Millisecond, true},
	} {
		wait, apply := l.admit(step.ip, step.n, t0.Add(step.at))
		if wait != step.wait || apply != step.apply {
			t.Errorf("step %d (%s, %d bytes at %v): wait %v apply %v, want %v %v", i, step.ip, step.n, step.at, wait, apply, step.wait, step.apply)
		}
	}
	var off *peerLimiter
	if w, ok := off.admit("a", 1<<30, t0); w != 0 || !ok {
		t.Errorf("no limiter: %v %v", w, ok)
	}
	if w, ok := newPeerLimiter(-1, 1).admit("a", 1<<30, t0); w != 0 || !ok {
		t.Errorf("a negative rate (no limit): %v %v", w, ok)
	}
}

// The buckets of peers that are back within their rate are forgotten when the map is full,
// so allow-from any cannot grow it without bound.
func TestPeerLimiterForgetsIdlePeers(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newPeerLimiter(1000, 2000)
	for i := range maxPeerBuckets {
		l.admit(fmt.Sprintf("10.0.%d.%d", i/256, i%256), 100, t0)
	}
	l.admit("10.1.0.0", 100, t0.Add(time.Second)) // the others have refilled by now
	if n := len(l.buckets); n != 1 {
		t.Fatalf("%d buckets after %d idle peers and a new one, want 1", n, maxPeerBuckets)
	}
	for i := range maxPeerBuckets { // all in debt at once
		l.admit(fmt.Sprintf("10.2.%d.%d", i/256, i%256), 3000, t0.Add(time.Second))
	}
	if n := len(l.buckets); n > maxPeerBuckets {
		t.Fatalf("%d buckets, over the bound of %d", n, maxPeerBuckets)
	}
}

// A peer pushing admits as fast as it can is held to its rate (what reaches the index is
// at most the burst, the debt and the rate's worth), its sends back up, and another
// engine's events are still applied meanwhile.
func TestServerPacesAPeerOverItsRate(t *testing.T) {
	noLeaks(t)
	const rate, burst = 64 << 10, 16 << 10
	ls := startServer(t, ServerConfig{Allow: AllowAny, PeerRate: rate, PeerBurst: burst}, nil)
	flooder := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr()) // source 127.0.0.1
	if err := flooder.SetSndtimeo(20 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	frame := len(mustEncode(t, KVAdmitMsg{InstanceID: "flood", Key: 1 << 62, Location: "cpu"}))
	var sent atomic.Int64
	stop, stopped := make(chan struct{}), make(chan struct{})
	begin := time.Now()
	go func() {
		defer close(stopped)
		r := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			var frames [][]byte
			for range 10 {
				b, _ := Encode(KVAdmitMsg{InstanceID: "flood", Key: int64(r.Uint64() | 1<<62), Location: "cpu"})
				frames = append(frames, b)
			}
			if _, err := flooder.SendMessage(frames); err == nil {
				sent.Add(int64(len(frames)))
			}
		}
	}()
	applied := func() float64 { return testutil.ToFloat64(ls.idx.met.ops[0][0]) }
	eventually(t, "the flooder to be slowed", func() bool { return testutil.ToFloat64(ls.overMsgs.WithLabelValues("delayed")) > 0 })

	engine := ls.socket(t, zmq.PUSH, "tcp://127.0.0.2:0;"+ls.PullAddr())
	p := prompt(5, 512)
	if _, err := engine.SendMessage(encodeAll(t, cat(regMsg("engine", 0, "127.0.0.2"), admits(t, "engine", 0, "cpu", p, 0, 2)))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other engine's admits beside the flood", func() bool { return len(ls.idx.Lookup(p)) == 1 })

	got, took := applied(), time.Since(begin)
	close(stop)
	<-stopped
	allowed := (2*burst + rate*took.Seconds()) / float64(frame)
	if got-2 > allowed+10 { // 2 admits are the other engine's; 10 frames: one message
		t.Errorf("%.0f flood admits applied in %v: over the %.0f the rate allows (%d bytes/s, %d-byte burst, %d-byte frames)", got-2, took, allowed, rate, burst, frame)
	}
	if s := float64(sent.Load()); s < 2*got {
		t.Logf("the flooder got %.0f frames out, %.0f applied: its sends were held back only by the queues", s, got)
	}
	if w := testutil.ToFloat64(ls.overWait); w <= 0 {
		t.Errorf("loadaware_lmcache_peer_over_rate_wait_seconds_total = %v", w)
	}
	for _, s := range []string{"faster than --lmcache-peer-rate", "peer=127.0.0.1"} {
		if !strings.Contains(ls.logs.String(), s) {
			t.Errorf("logs lack %q", s)
		}
	}
	flooder.Close()
	engine.Close()
	ls.closePeers(t)
}

// pushFullSync pushes a full sync of keys in LMCache's batches of 2,000 keys (18 KB each).
func pushFullSync(t *testing.T, push *zmq.Socket, keys int) {
	t.Helper()
	const perBatch = 2000
	for b := 0; b*perBatch < keys; b++ {
		m := FullSyncBatchMsg{InstanceID: "engine", Location: "cpu", SyncID: "s1", BatchID: b}
		for k := b * perBatch; k < min(keys, (b+1)*perBatch); k++ {
			m.Keys = append(m.Keys, int64(k+1)<<20)
		}
		if _, err := push.SendMessage(mustEncode(t, m)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := push.SendMessage(mustEncode(t, FullSyncEndMsg{InstanceID: "engine", Location: "cpu", SyncID: "s1", ActualTotalKeys: keys})); err != nil {
		t.Fatal(err)
	}
}

// Under the defaults, a full sync of 100,000 keys (about 0.9 MB; 100 GiB of an 8B model's
// KV cache is 3,200 keys) passes without being slowed.
func TestServerDefaultPeerRatePassesAFullSync(t *testing.T) {
	noLeaks(t)
	ls := startServer(t, ServerConfig{Allow: AllowAny}, nil)
	push := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
	const keys = 100_000
	pushFullSync(t, push, keys)
	eventually(t, "the full sync", func() bool { return ls.idx.Keys() == keys })
	for _, o := range []string{"delayed", "dropped"} {
		if n := testutil.ToFloat64(ls.overMsgs.WithLabelValues(o)); n != 0 {
			t.Errorf("a %d-key full sync under the default peer rate: %v messages %s", keys, n, o)
		}
	}
	push.Close()
	ls.closePeers(t)
}

// A full sync larger than the burst is slowed to the rate, and none of it is dropped.
//
// The sync is slowed only if the controller reads it fast enough to spend the burst, so the
// rate is set as low as a batch allows: one maxPeerWait must repay an 18 KB batch (at
// 384 KiB/s it repays 19.7 KB), else batches would be dropped. The controller then has
// 46 ms a batch to stay ahead of the rate. At 1 MiB/s it had 17 ms: under -race on a loaded
// 2-core CI machine it took 13 ms, which left 4.4 KB of debt a batch, 110 KB in all, and
// the 128 KiB burst was never spent.
func TestServerSlowsAFullSyncOverTheBurstWithoutLoss(t *testing.T) {
	noLeaks(t)
	ls := startServer(t, ServerConfig{Allow: AllowAny, PeerRate: 384 << 10, PeerBurst: 32 << 10}, nil)
	push := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
	const keys = 50_000 // about 450 KB: 14 bursts
	pushFullSync(t, push, keys)
	eventually(t, "the full sync", func() bool { return ls.idx.Keys() == keys })
	if n := testutil.ToFloat64(ls.overMsgs.WithLabelValues("delayed")); n == 0 {
		t.Error("a sync of 14 bursts was not slowed")
	}
	if n := testutil.ToFloat64(ls.overMsgs.WithLabelValues("dropped")); n != 0 {
		t.Errorf("%v messages of a full sync sent in LMCache's batches were dropped", n)
	}
	push.Close()
	ls.closePeers(t)
}

// charge takes every byte whatever the debt, and the wait is the whole debt's repayment.
func TestPeerLimiterCharge(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newPeerLimiter(1000, 2000)
	for i, step := range []struct {
		ip   string
		at   time.Duration
		n    int64
		wait time.Duration
	}{
		{"a", 0, 2000, 0},                           // the burst
		{"a", 0, 5000, 5 * time.Second},             // far deeper than the burst: taken, no cap
		{"a", 4 * time.Second, 0, time.Second},      // 4 s repaid of 5
		{"b", 0, 2500, 500 * time.Millisecond},      // its own bucket
		{"a", 5 * time.Second, 1, time.Millisecond}, // repaid, then 1 byte of debt
		{"c", time.Hour, 2001, time.Millisecond},    // a new bucket starts full
	} {
		if wait := l.charge(step.ip, step.n, t0.Add(step.at)); wait != step.wait {
			t.Errorf("step %d (%s, %d bytes at %v): wait %v, want %v", i, step.ip, step.n, step.at, wait, step.wait)
		}
	}
	// what the front charged counts against the messages: 2,500 bytes deep, one is dropped
	l.charge("d", 4500, t0)
	if _, apply := l.admit("d", 1, t0); apply {
		t.Error("a message of a peer charged past its burst by dropped bytes was applied")
	}
	var off *peerLimiter
	if w := off.charge("a", 1<<30, t0); w != 0 {
		t.Errorf("no limiter: %v", w)
	}
}

// The bytes of messages the front drops are charged to the peer's rate before they are
// read: a peer sending messages over the bounds is read at its rate once its burst is
// spent, and its next message waits for the debt.
func TestFrontChargesDroppedBytes(t *testing.T) {
	noLeaks(t)
	const rate, burst, frame = 512 << 10, 64 << 10, 64 << 10
	seen := &seenFrames{}
	ls := startServer(t, ServerConfig{PeerRate: rate, PeerBurst: burst, MaxFrameBytes: frame, Ingest: seen.ingest}, []string{"127.0.0.1"})
	push := ls.socket(t, zmq.PUSH, "tcp://"+ls.PullAddr())
	const msgs = 4 // of two frames at the cap: over the message cap, dropped
	begin := time.Now()
	for range msgs {
		sendFrames(t, push, repeatFrames(2, frame))
	}
	sendFrames(t, push, [][]byte{[]byte("after")})
	eventually(t, "the message after the dropped ones", func() bool { return seen.sawLast("after") })
	took := time.Since(begin)
	if got := testutil.ToFloat64(ls.bigMsgs); got != msgs {
		t.Errorf("%v messages dropped, want %d", got, msgs)
	}
	// The bucket starts full at the burst; the front goes on only once the debt is repaid.
	if least := time.Duration(float64(msgs*2*frame-burst) / rate * float64(time.Second)); took < least {
		t.Errorf("%d dropped bytes were read and the next message applied in %v: faster than %d bytes/s after a %d-byte burst allows (%v)", msgs*2*frame, took, rate, burst, least)
	}
	if w := testutil.ToFloat64(ls.overWait); w <= 0 {
		t.Errorf("loadaware_lmcache_peer_over_rate_wait_seconds_total = %v, want the front's waits", w)
	}
	if !strings.Contains(ls.logs.String(), "faster than --lmcache-peer-rate") {
		t.Errorf("logs lack the over-rate line: %s", ls.logs.String())
	}
	push.Close()
	ls.closePeers(t)
}

// Commands a peer sends (PING, PONG, ...), which the front hands to libzmq at once, are
// charged to its rate as their wire bytes, at least zmtp.CommandMinChargeBytes each: a
// flood of PINGs is read at the rate once the burst is spent, and the message after it
// waits for the debt. The flood's 32,760 bytes are within the burst: only the least charge
// (64 bytes a 9-byte PING, 232,960 in all) puts it in debt. The PINGs are put into a
// real PUSH socket's connection, between its messages, by a proxy in front of the front.
func TestFrontChargesCommands(t *testing.T) {
	noLeaks(t)
	const rate, burst, flood = 256 << 10, 32 << 10, 32 << 10
	seen := &seenFrames{}
	ls := startServer(t, ServerConfig{PeerRate: rate, PeerBurst: burst, Ingest: seen.ingest}, []string{"127.0.0.1"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	push := ls.socket(t, zmq.PUSH, "tcp://"+ln.Addr().String())
	pc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	fc, err := net.Dial("tcp", ls.PullAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	var mu sync.Mutex // one write to the front at a time: the push's, or the PINGs
	copied := make(chan struct{}, 2)
	go func() { // the front's (libzmq's) side to the push: its greeting, READY and PONGs
		defer func() { copied <- struct{}{} }()
		io.Copy(pc, fc)
	}()
	go func() {
		defer func() { copied <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := pc.Read(buf)
			mu.Lock()
			_, werr := fc.Write(buf[:n])
			mu.Unlock()
			if err != nil || werr != nil {
				return
			}
		}
	}()
	sendFrames(t, push, [][]byte{[]byte("before")})
	eventually(t, "the message before the PINGs", func() bool { return seen.sawLast("before") })
	// PINGs of 9 bytes (a TTL, no context), between the push's messages
	ping := []byte{0x04, 7, 4, 'P', 'I', 'N', 'G', 0, 10}
	begin := time.Now()
	mu.Lock()
	_, err = fc.Write(bytes.Repeat(ping, flood/len(ping)))
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	sendFrames(t, push, [][]byte{[]byte("after")})
	eventually(t, "the message after the PINGs", func() bool { return seen.sawLast("after") })
	took := time.Since(begin)
	// The bucket starts full at the burst (less the message before); the front goes on only
	// once the debt is repaid, less the last CommandChargeBytes it may read before charging.
	charged := flood / len(ping) * zmtp.CommandMinChargeBytes
	if least := time.Duration(float64(charged-burst-zmtp.CommandChargeBytes) / rate * float64(time.Second)); took < least {
		t.Errorf("%d bytes of PINGs (%d charged) were read and the next message applied in %v: faster than %d bytes/s after a %d-byte burst allows (%v)", flood, charged, took, rate, burst, least)
	}
	if w := testutil.ToFloat64(ls.overWait); w <= 0 {
		t.Errorf("loadaware_lmcache_peer_over_rate_wait_seconds_total = %v, want the front's waits", w)
	}
	push.Close()
	pc.Close()
	fc.Close()
	<-copied
	<-copied
	ls.closePeers(t)
}
