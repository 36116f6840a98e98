package replica

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lmcache"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

var keys = lmcache.KeyConfig{HashSeed: "123", ChunkSize: 4}

// startNATS runs a real NATS server in process on a free loopback port.
func startNATS(t testing.TB) string {
	t.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// node is one picker's shared parts: its index, gate, fleet and replica.
type node struct {
	idx   *lmcache.Index
	gate  *Gate
	fleet *fleet.Set
	r     *Replica
}

var endpoints = []string{"10.0.0.1:8000", "10.0.0.2:8000"}

func startNode(t testing.TB, url string, tune func(*Config)) *node {
	t.Helper()
	idx, g := newIndexGate(t)
	f := fleet.New()
	f.Update(endpoints)
	cfg := Config{URL: url, Gate: g, Fleet: f, ScrapeInterval: -1, StateInterval: 20 * time.Millisecond, PeerTimeout: 200 * time.Millisecond,
		PeerWait: 50 * time.Millisecond}
	if tune != nil {
		tune(&cfg)
	}
	r, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{idx: idx, gate: g, fleet: f, r: r}
	t.Cleanup(func() { n.close() })
	return n
}

func (n *node) close() {
	if n.r != nil {
		_ = n.r.Close()
		n.r = nil
	}
}

func (n *node) awaitReady(t testing.TB) {
	t.Helper()
	select {
	case <-n.r.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("replica never turned ready")
	}
}

// engineSays feeds frames to n as its LMCache controller would, from engine IP peer.
func (n *node) engineSays(t testing.TB, peer string, msgs ...lmcache.Message) {
	t.Helper()
	frames := make([][]byte, len(msgs))
	for i, m := range msgs {
		f, err := lmcache.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = f
	}
	n.gate.Ingest(peer, frames, func() bool { return n.idx.ApplyFrames(frames, peer, time.Now()) > 0 })
}

func tokens(id, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(id*1000 + i)
	}
	return out
}

func admitsOf(t testing.TB, inst string, toks []uint32) []lmcache.Message {
	h, err := lmcache.NewHasher(keys)
	if err != nil {
		t.Fatal(err)
	}
	var out []lmcache.Message
	for _, k := range h.ChunkKeys(toks) {
		out = append(out, lmcache.KVAdmitMsg{InstanceID: inst, WorkerID: 0, Key: k, Location: "cpu"})
	}
	return out
}

func register(inst, ip string) lmcache.Message {
	s := "x"
	return lmcache.RegisterMsg{InstanceID: inst, IP: ip, Port: 9, DistributedURL: &s}
}

// eventually polls cond (a state reached through another goroutine's network traffic)
// until it holds or 10 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func matched(ix *lmcache.Index, toks []uint32) map[string]int {
	out := map[string]int{}
	for _, m := range ix.Lookup(toks) {
		out[m.IP] = m.Tokens
	}
	return out
}

func remote(f *fleet.Set, addr string) int {
	all, local := f.Loads([]string{addr}), f.LocalLoads([]string{addr})
	return all[0].InFlight() - local[0].InFlight()
}

func TestFramesReachEveryReplica(t *testing.T) {
	url := startNATS(t)
	a, b := startNode(t, url, nil), startNode(t, url, nil)
	a.awaitReady(t)
	b.awaitReady(t)
	p1, p2 := tokens(1, 16), tokens(2, 16)
	a.engineSays(t, "10.0.0.1", register("e1", "10.0.0.1"))
	a.engineSays(t, "10.0.0.1", admitsOf(t, "e1", p1)...)
	b.engineSays(t, "10.0.0.2", register("e2", "10.0.0.2"))
	b.engineSays(t, "10.0.0.2", admitsOf(t, "e2", p2)...)
	want := func(toks []uint32, ip string) map[string]int { return map[string]int{ip: len(toks)} }
	for _, n := range []*node{a, b} {
		eventually(t, "both engines' chunks in both indexes", func() bool {
			return cmp.Equal(matched(n.idx, p1), want(p1, "10.0.0.1")) && cmp.Equal(matched(n.idx, p2), want(p2, "10.0.0.2"))
		})
	}
}

func TestPeerFramesKeepTheTrustRules(t *testing.T) {
	url := startNATS(t)
	a, b := startNode(t, url, nil), startNode(t, url, nil)
	a.awaitReady(t)
	b.awaitReady(t)
	// 10.0.0.9 registers as 10.0.0.1: refused on a, so never published; b never sees it.
	a.engineSays(t, "10.0.0.9", register("evil", "10.0.0.1"))
	a.engineSays(t, "10.0.0.1", register("e1", "10.0.0.1"))
	a.engineSays(t, "10.0.0.1", admitsOf(t, "e1", tokens(1, 8))...)
	eventually(t, "the honest engine's chunks on b", func() bool { return len(matched(b.idx, tokens(1, 8))) == 1 })
	for _, info := range b.idx.Instances() {
		if info.ID == "evil" {
			t.Errorf("b knows the refused instance: %+v", info)
		}
	}
}

// history records the peers' bookings a replica hands to its History.
type history struct {
	mu     sync.Mutex
	booked []string
}

func (h *history) PeerBooked(addr string, tag uint64) {
	h.mu.Lock()
	h.booked = append(h.booked, fmt.Sprintf("%s#%d", addr, tag))
	h.mu.Unlock()
}

func (h *history) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.booked)
}

func TestBookingsCountOnEveryReplica(t *testing.T) {
	url := startNATS(t)
	var hist history
	a, b := startNode(t, url, nil), startNode(t, url, func(c *Config) { c.History = &hist })
	a.awaitReady(t)
	b.awaitReady(t)
	ep := endpoints[0]
	b1, err := a.fleet.BookTagged(ep, 42)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := a.fleet.Book(ep)
	eventually(t, "b counts a's two bookings", func() bool { return remote(b.fleet, ep) == 2 })
	if load, _ := a.r.Published(); load < 2 {
		t.Errorf("a published %d load messages, want at least its 2 bookings", load)
	}
	eventually(t, "b heard all a published", func() bool {
		load, _ := a.r.Published()
		heard, _ := b.r.Heard(a.r.Origin())
		return heard >= load
	})
	if diff := cmp.Diff([]string{ep + "#42", ep + "#0"}, hist.got()); diff != "" {
		t.Errorf("b's history of a's bookings (-want +got):\n%s", diff)
	}
	b1.Decoding()
	eventually(t, "b sees one decoding", func() bool { return b.fleet.Loads([]string{ep})[0].Decode == 1 })
	b1.Release()
	b2.Release()
	eventually(t, "b counts none", func() bool { return remote(b.fleet, ep) == 0 })
}

func TestDeadReplicasBookingsExpire(t *testing.T) {
	url := startNATS(t)
	a, b := startNode(t, url, nil), startNode(t, url, nil)
	a.awaitReady(t)
	b.awaitReady(t)
	ep := endpoints[1]
	for range 3 {
		if _, err := a.fleet.Book(ep); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "b counts a's bookings", func() bool { return remote(b.fleet, ep) == 3 })
	a.close() // never released: a died
	// a sent its last state before close returned: the peer timeout runs from no later.
	closed := time.Now()
	eventually(t, "a's bookings gone from b", func() bool { return remote(b.fleet, ep) == 0 })
	if took := time.Since(closed); took > time.Second {
		t.Errorf("a's bookings stayed %s on b after a closed (peer timeout 200ms)", took)
	}
}

func TestWarmStartTakesTheIndexThenTheStream(t *testing.T) {
	url := startNATS(t)
	a := startNode(t, url, nil)
	a.awaitReady(t)
	a.engineSays(t, "10.0.0.1", register("e1", "10.0.0.1"))
	a.engineSays(t, "10.0.0.2", register("e2", "10.0.0.2"))
	p := tokens(3, 32)
	a.engineSays(t, "10.0.0.2", admitsOf(t, "e2", p[:16])...)
	a.engineSays(t, "10.0.0.1", admitsOf(t, "e1", p)...)
	// An evict before the snapshot must not come back from the stream.
	a.engineSays(t, "10.0.0.1", lmcache.KVEvictMsg(admitsOf(t, "e1", p)[7].(lmcache.KVAdmitMsg)))
	// c has a peer: it waits for a's state however long a loaded host takes to deliver it
	// (the 50 ms of startNode can pass first), and keeps a as a peer for seconds of silence.
	c := startNode(t, url, func(c *Config) { c.PeerWait, c.PeerTimeout = time.Hour, 5*time.Second })
	c.awaitReady(t)
	if diff := cmp.Diff(a.idx.Lookup(p), c.idx.Lookup(p)); diff != "" {
		t.Errorf("the started replica's lookup differs from its peer's (-peer +started):\n%s", diff)
	}
	q := tokens(4, 8)
	a.engineSays(t, "10.0.0.2", admitsOf(t, "e2", q)...)
	eventually(t, "frames after the snapshot reach the started replica", func() bool { return len(matched(c.idx, q)) == 1 })
	if got := c.gate.met.warm.WithLabelValues("snapshot"); counterValue(got) != 1 {
		t.Errorf("warm starts by snapshot: %v, want 1", counterValue(got))
	}
}

func TestLoneReplicaTurnsReadyWithoutPeers(t *testing.T) {
	url := startNATS(t)
	a := startNode(t, url, nil)
	a.awaitReady(t)
	if v := counterValue(a.gate.met.warm.WithLabelValues("no-peer")); v != 1 {
		t.Errorf("no-peer warm starts: %v, want 1", v)
	}
}

func TestUnreachableNATSTurnsReadyAfterTheWarmTimeout(t *testing.T) {
	// Port 1 of loopback: nobody listens there (binding it needs root).
	a := startNode(t, "nats://127.0.0.1:1", func(c *Config) { c.WarmTimeout = 100 * time.Millisecond })
	a.awaitReady(t)
	if v := counterValue(a.gate.met.warm.WithLabelValues("timeout")); v != 1 {
		t.Errorf("timed-out warm starts: %v, want 1", v)
	}
}
