package kvevents_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/kvpublish"
	"github.com/loadaware/loadaware-epp/kvevents"
	"github.com/loadaware/loadaware-epp/kvindex"
	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const bs = 4

// prompt is 6 blocks of distinct tokens.
var prompt = func() []uint32 {
	p := make([]uint32, 6*bs)
	for i := range p {
		p[i] = uint32(1000 + i)
	}
	return p
}()

// stored is a BlockStored of prompt's blocks [from, to) with engine hashes base+i,
// chained on the block before from.
func stored(from, to int, base uint64) kvindex.Event {
	ev := kvindex.Event{Kind: kvindex.BlockStored, BlockSize: bs, Tokens: prompt[from*bs : to*bs], Medium: "GPU"}
	for i := from; i < to; i++ {
		ev.Hashes = append(ev.Hashes, base+uint64(i))
	}
	if from > 0 {
		ev.Parent, ev.HasParent = base+uint64(from-1), true
	}
	return ev
}

func removed(medium string, hashes ...uint64) kvindex.Event {
	return kvindex.Event{Kind: kvindex.BlockRemoved, Hashes: hashes, Medium: medium}
}

// gauge reads a gauge without labels from the rig's registry.
func (r *rig) gauge(name string) float64 {
	mfs, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	r.t.Fatalf("no gauge %s", name)
	return 0
}

// net127 is a loopback /24 of its own for one test (all of 127/8 is loopback on Linux),
// so every engine of the test has its own IP and all share one port, as pods do.
func net127(t testing.TB) string {
	return fmt.Sprintf("127.%d.%d.", 100+rand.IntN(150), rand.IntN(256))
}

// engines starts n publishers on hosts prefix1..prefixn sharing one PUB port (and one
// replay port when replay is set); opts change each publisher's config.
func engines(t testing.TB, n int, replay bool, l kvevents.Layout, opts ...func(*kvpublish.PublisherConfig)) (pubs []*kvpublish.Publisher, eps []string, port, rport int) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		prefix := net127(t)
		pubs, eps, port, rport = nil, nil, 0, 0
		var err error
		for i := 1; i <= n && err == nil; i++ {
			host := prefix + strconv.Itoa(i)
			cfg := kvpublish.PublisherConfig{Addr: net.JoinHostPort(host, strconv.Itoa(port)), Layout: l, DPRank: 0}
			for _, o := range opts {
				o(&cfg)
			}
			if replay {
				cfg.ReplayAddr = net.JoinHostPort(host, strconv.Itoa(rport))
			}
			var p *kvpublish.Publisher
			if p, err = kvpublish.NewPublisher(cfg); err == nil {
				pubs = append(pubs, p)
				eps = append(eps, net.JoinHostPort(host, "8000"))
				_, ps, _ := net.SplitHostPort(p.Addr())
				port, _ = strconv.Atoi(ps)
				if replay {
					_, rs, _ := net.SplitHostPort(p.ReplayAddr())
					rport, _ = strconv.Atoi(rs)
				}
			}
		}
		if err == nil {
			for _, p := range pubs {
				t.Cleanup(func() { p.Close() })
			}
			return pubs, eps, port, rport
		}
		for _, p := range pubs {
			p.Close()
		}
		if attempt == 5 {
			t.Fatalf("cannot start publishers: %v", err)
		}
	}
}

type rig struct {
	t    *testing.T
	ix   *kvindex.Index
	sub  *kvevents.Subscriber
	reg  *prometheus.Registry
	seen chan int64
}

func newRig(t *testing.T, eps []string, port, rport int, opts ...func(*kvevents.SubscriberConfig)) *rig {
	t.Helper()
	r := &rig{t: t, reg: prometheus.NewRegistry(), seen: make(chan int64, 1024)}
	var err error
	if r.ix, err = kvindex.NewIndex(kvindex.IndexConfig{Seed: 7, Registerer: r.reg}); err != nil {
		t.Fatal(err)
	}
	cfg := kvevents.SubscriberConfig{Port: port, ReplayPort: rport, Registerer: r.reg, PollInterval: 10 * time.Millisecond,
		ReplayTimeout: 5 * time.Second, OnBatch: func(_ string, seq int64) { r.seen <- seq }}
	for _, o := range opts {
		o(&cfg)
	}
	r.sub, err = kvevents.NewSubscriber(cfg, r.ix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.sub.Close() })
	r.sub.SetEndpoints(eps)
	return r
}

// await waits until the subscriber has handled the batch numbered seq.
func (r *rig) await(seq int64) {
	r.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s := <-r.seen:
			if s == seq {
				return
			}
		case <-timeout:
			r.t.Fatalf("batch %d was not handled within 10s", seq)
		}
	}
}

func (r *rig) ready() {
	r.t.Helper()
	select {
	case <-r.sub.Ready():
	case <-time.After(10 * time.Second):
		r.t.Fatal("subscriber not ready within 10s")
	}
}

func (r *rig) matched(ep string) int { return r.ix.Match(prompt, []string{ep})[0].Matched }

func (r *rig) counter(name, label, value string) float64 {
	mfs, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func publish(t *testing.T, p *kvpublish.Publisher, evs ...kvindex.Event) int64 {
	t.Helper()
	seq, err := p.Publish(evs)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// subscribed publishes on every publisher once its subscriber is connected.
func subscribed(t *testing.T, pubs []*kvpublish.Publisher) {
	t.Helper()
	for _, p := range pubs {
		if err := p.WaitSubscribed(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSubscriberFollowsEndpoints(t *testing.T) {
	for _, l := range []kvevents.Layout{{}, {MapEvents: true, BytesHashes: true}} {
		t.Run(fmt.Sprintf("%+v", l), func(t *testing.T) {
			pubs, eps, port, _ := engines(t, 2, false, l)
			r := newRig(t, eps, port, 0)
			r.ready()
			subscribed(t, pubs)
			r.await(publish(t, pubs[0], stored(0, 3, 100)))
			r.await(publish(t, pubs[1], stored(0, 5, 900)))
			got := r.ix.Match(prompt, eps)
			if got[0].Matched != 3*bs || got[1].Matched != 5*bs {
				t.Fatalf("Match = %+v, want %d and %d", got, 3*bs, 5*bs)
			}
			r.await(publish(t, pubs[1], removed("GPU", 902)))
			if m := r.matched(eps[1]); m != 2*bs {
				t.Errorf("after removing block 2: %d, want %d", m, 2*bs)
			}
			if n := r.gauge("loadaware_kvevents_subscriptions"); n != 2 {
				t.Errorf("subscriptions = %v, want 2", n)
			}
			r.sub.SetEndpoints(eps[:1])
			if err := r.sub.Close(); err != nil {
				t.Fatal(err)
			}
			if m := r.matched(eps[1]); m != 0 {
				t.Errorf("endpoint that left still matches %d tokens", m)
			}
		})
	}
}

// TestSubscriberGapWithoutReplayFailsClosed: a lost batch (here a removal) cannot be
// known, so the endpoint is credited with nothing from the next batch on.
func TestSubscriberGapWithoutReplayFailsClosed(t *testing.T) {
	pubs, eps, port, _ := engines(t, 1, false, kvevents.Layout{})
	r := newRig(t, eps, port, 0)
	r.ready()
	subscribed(t, pubs)
	r.await(publish(t, pubs[0], stored(0, 4, 100)))
	pubs[0].Skip([]kvindex.Event{removed("GPU", 103)})
	r.await(publish(t, pubs[0]))
	if m := r.matched(eps[0]); m != 0 {
		t.Errorf("after a gap without replay: %d tokens credited, want 0", m)
	}
	if got := r.counter("loadaware_kvevents_endpoint_drops_total", "reason", "gap"); got != 1 {
		t.Errorf("endpoint drops for gap = %v, want 1", got)
	}
	r.await(publish(t, pubs[0], stored(0, 1, 500)))
	if m := r.matched(eps[0]); m != bs {
		t.Errorf("new events after the drop: %d, want %d", m, bs)
	}
}

// TestSubscriberGapRepairedByReplay: the lost removal is replayed, so the index is exact
// again: neither the removed block credited (phantom) nor the rest dropped.
func TestSubscriberGapRepairedByReplay(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("replay without topic %v", old), func(t *testing.T) {
			pubs, eps, port, rport := engines(t, 1, true, kvevents.Layout{MapEvents: true},
				func(c *kvpublish.PublisherConfig) { c.ReplayWithoutTopic = old })
			r := newRig(t, eps, port, rport)
			r.ready()
			subscribed(t, pubs)
			r.await(publish(t, pubs[0], stored(0, 4, 100)))
			pubs[0].Skip([]kvindex.Event{removed("GPU", 103)})
			r.await(publish(t, pubs[0], stored(4, 5, 100)))
			if m := r.matched(eps[0]); m != 3*bs {
				t.Errorf("after a replayed gap: %d tokens, want %d (block 3 removed, block 4 after it)", m, 3*bs)
			}
			if got := r.counter("loadaware_kvevents_replays_total", "outcome", "complete"); got < 1 {
				t.Errorf("complete replays = %v", got)
			}
			if got := r.counter("loadaware_kvevents_endpoint_drops_total", "reason", "gap"); got != 0 {
				t.Errorf("endpoint drops = %v, want 0", got)
			}
		})
	}
}

// TestSubscriberEngineRestart: the sequence going back drops what the old engine held.
func TestSubscriberEngineRestart(t *testing.T) {
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprintf("replay %v", replay), func(t *testing.T) {
			pubs, eps, port, rport := engines(t, 1, replay, kvevents.Layout{})
			r := newRig(t, eps, port, rport)
			r.ready()
			subscribed(t, pubs)
			publish(t, pubs[0])
			r.await(publish(t, pubs[0], stored(0, 4, 100)))
			pubs[0].Restart()
			r.await(publish(t, pubs[0], stored(0, 1, 700)))
			if m := r.matched(eps[0]); m != bs {
				t.Errorf("after a restart: %d tokens, want the new engine's %d", m, bs)
			}
			if got := r.counter("loadaware_kvevents_sequence_breaks_total", "kind", "reset"); got != 1 {
				t.Errorf("resets = %v, want 1", got)
			}
		})
	}
}

// TestSubscriberRebuildsFromReplayBeforeReady: a picker that starts after the engines
// has their caches in its index by the time Ready is closed.
func TestSubscriberRebuildsFromReplayBeforeReady(t *testing.T) {
	pubs, eps, port, rport := engines(t, 2, true, kvevents.Layout{BytesHashes: true})
	publish(t, pubs[0], stored(0, 2, 100))
	publish(t, pubs[0], stored(2, 6, 100))
	publish(t, pubs[1], stored(0, 1, 100))
	publish(t, pubs[1], removed("GPU", 100))
	r := newRig(t, eps, port, rport)
	r.ready()
	got := r.ix.Match(prompt, eps)
	if got[0].Matched != 6*bs || got[1].Matched != 0 {
		t.Fatalf("at ready: %+v, want %d and 0", got, 6*bs)
	}
	subscribed(t, pubs)
	r.await(publish(t, pubs[1], stored(0, 2, 300)))
	if m := r.matched(eps[1]); m != 2*bs {
		t.Errorf("live after the replay: %d, want %d", m, 2*bs)
	}
}

// TestSubscriberBadPayloadCountedAndSkipped: a batch that does not decode is counted, the
// endpoint fails closed, and the loop goes on with the next batch.
func TestSubscriberBadPayloadCountedAndSkipped(t *testing.T) {
	pubs, eps, port, _ := engines(t, 1, false, kvevents.Layout{})
	r := newRig(t, eps, port, 0)
	r.ready()
	subscribed(t, pubs)
	r.await(publish(t, pubs[0], stored(0, 3, 100)))
	seq, err := pubs[0].SendRaw([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	if err != nil {
		t.Fatal(err)
	}
	r.await(seq)
	if m := r.matched(eps[0]); m != 0 {
		t.Errorf("after a bad batch: %d tokens credited, want 0", m)
	}
	if got := r.counter("loadaware_kvevents_batches_total", "outcome", "bad_payload_malformed"); got != 1 {
		t.Errorf("bad payloads = %v, want 1", got)
	}
	r.await(publish(t, pubs[0], stored(0, 2, 100)))
	if m := r.matched(eps[0]); m != 2*bs {
		t.Errorf("after the bad batch: %d, want %d", m, 2*bs)
	}
}

// TestSubscriberEngineRestartWhileDisconnected: the engine restarts and publishes past
// the last sequence number seen before the picker reconnects, so the numbers alone look
// like a gap. The lost connection is what tells: the old engine's blocks are dropped and
// the new engine's replayed, with no phantom credit for what the old one held.
func TestSubscriberEngineRestartWhileDisconnected(t *testing.T) {
	pubs, eps, port, rport := engines(t, 1, true, kvevents.Layout{})
	r := newRig(t, eps, port, rport)
	r.ready()
	subscribed(t, pubs)
	publish(t, pubs[0], stored(0, 4, 100))
	r.await(publish(t, pubs[0]))
	cfg := kvpublish.PublisherConfig{Addr: pubs[0].Addr(), ReplayAddr: pubs[0].ReplayAddr(), DPRank: 0}
	if err := pubs[0].Close(); err != nil {
		t.Fatal(err)
	}
	np, err := kvpublish.NewPublisher(cfg)
	if err != nil {
		t.Fatalf("restart the engine on the same address: %v", err)
	}
	t.Cleanup(func() { np.Close() })
	np.Skip([]kvindex.Event{stored(0, 1, 700)})
	np.Skip(nil)
	np.Skip(nil)
	subscribed(t, []*kvpublish.Publisher{np})
	r.await(publish(t, np, stored(1, 2, 700)))
	if m := r.matched(eps[0]); m != 2*bs {
		t.Errorf("after a restart behind a disconnect: %d tokens, want the new engine's %d", m, 2*bs)
	}
	if got := r.counter("loadaware_kvevents_sequence_breaks_total", "kind", "disconnect"); got != 1 {
		t.Errorf("disconnects = %v, want 1", got)
	}
}

// TestSubscriberDataParallelRanks: rank r of an endpoint publishes on Port+r; each rank
// is a stream of its own, the endpoint gets its best rank's prefix, and a rank that loses
// a batch drops only its own entries.
func TestSubscriberDataParallelRanks(t *testing.T) {
	var pubs []*kvpublish.Publisher
	var host string
	var port int
	for attempt := 0; len(pubs) < 2; attempt++ {
		for _, p := range pubs {
			p.Close()
		}
		pubs = nil
		if attempt == 5 {
			t.Fatal("cannot bind two consecutive ports")
		}
		host = net127(t) + "1"
		p0, err := kvpublish.NewPublisher(kvpublish.PublisherConfig{Addr: host + ":0", DPRank: 0})
		if err != nil {
			continue
		}
		pubs = append(pubs, p0)
		_, ps, _ := net.SplitHostPort(p0.Addr())
		port, _ = strconv.Atoi(ps)
		if p1, err := kvpublish.NewPublisher(kvpublish.PublisherConfig{Addr: net.JoinHostPort(host, strconv.Itoa(port+1)), DPRank: 1}); err == nil {
			pubs = append(pubs, p1)
		}
	}
	for _, p := range pubs {
		t.Cleanup(func() { p.Close() })
	}
	ep := net.JoinHostPort(host, "8000")
	r := &rig{t: t, reg: prometheus.NewRegistry(), seen: make(chan int64, 1024)}
	r.ix, _ = kvindex.NewIndex(kvindex.IndexConfig{Seed: 7, Registerer: r.reg})
	var err error
	r.sub, err = kvevents.NewSubscriber(kvevents.SubscriberConfig{Port: port, Ranks: 2, Registerer: r.reg, PollInterval: 10 * time.Millisecond,
		OnBatch: func(_ string, seq int64) { r.seen <- seq }}, r.ix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.sub.Close() })
	r.sub.SetEndpoints([]string{ep})
	r.ready()
	subscribed(t, pubs)
	r.await(publish(t, pubs[0], stored(0, 2, 100)))
	r.await(publish(t, pubs[1], stored(0, 5, 100)))
	if m := r.matched(ep); m != 5*bs {
		t.Fatalf("two ranks: %d tokens, want rank 1's %d", m, 5*bs)
	}
	pubs[1].Skip(nil)
	r.await(publish(t, pubs[1]))
	if m := r.matched(ep); m != 2*bs {
		t.Errorf("after rank 1 lost a batch: %d tokens, want rank 0's %d", m, 2*bs)
	}
	if n := r.gauge("loadaware_kvevents_subscriptions"); n != 2 {
		t.Errorf("subscriptions = %v, want one per rank", n)
	}
}

// TestSubscriberReplayAfterATimedOutReplay: a replay that times out closes the replay
// socket (late replies must not be taken for the next replay's) and opens a new one,
// with a new waiter, on which the next replay is answered. The first replay waits out its
// whole timeout; the second must be answered within it, so it is a second, not 100 ms: a
// loaded -race host may take that long for a loopback round trip.
func TestSubscriberReplayAfterATimedOutReplay(t *testing.T) {
	pubs, eps, port, _ := engines(t, 1, false, kvevents.Layout{})
	host, _, _ := net.SplitHostPort(eps[0])
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	router, err := zctx.NewSocket(zmq.ROUTER)
	if err != nil {
		t.Fatal(err)
	}
	if err := router.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := router.Bind("tcp://" + host + ":*"); err != nil {
		t.Fatal(err)
	}
	last, err := router.GetLastEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	rport, _ := strconv.Atoi(last[strings.LastIndex(last, ":")+1:])
	// The replay engine: silent for the first request, the end marker for the others.
	served := make(chan struct{})
	go func() {
		defer close(served)
		defer router.Close()
		for n := 1; ; n++ {
			req, err := router.RecvMessageBytes(0)
			if err != nil {
				return // the context's Term at the test's end
			}
			if n > 1 {
				router.SendMessage(req[0], "", "", kvevents.SeqFrame(kvevents.EndOfReplay), "")
			}
		}
	}()
	t.Cleanup(func() {
		zctx.Term()
		<-served
	})

	r := &rig{t: t, reg: prometheus.NewRegistry(), seen: make(chan int64, 1024)}
	if r.ix, err = kvindex.NewIndex(kvindex.IndexConfig{Seed: 7, Registerer: r.reg}); err != nil {
		t.Fatal(err)
	}
	r.sub, err = kvevents.NewSubscriber(kvevents.SubscriberConfig{Port: port, ReplayPort: rport, Registerer: r.reg, PollInterval: 10 * time.Millisecond,
		ReplayTimeout: time.Second, OnBatch: func(_ string, seq int64) { r.seen <- seq }}, r.ix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.sub.Close() })
	r.sub.SetEndpoints(eps)
	r.ready() // after the initial replay timed out
	subscribed(t, pubs)
	r.await(publish(t, pubs[0], stored(0, 2, 100)))
	pubs[0].Skip(nil)
	r.await(publish(t, pubs[0])) // a gap: replayed on the new socket
	for _, c := range []struct {
		outcome string
		want    float64
	}{{"timeout", 1}, {"complete", 1}, {"failed", 0}} {
		if got := r.counter("loadaware_kvevents_replays_total", "outcome", c.outcome); got != c.want {
			t.Errorf("replays %s = %v, want %v", c.outcome, got, c.want)
		}
	}
}

// snapshotter answers every engine with the same snapshot, or err.
type snapshotter struct {
	snap kvevents.Snapshot
	err  error
}

func (s snapshotter) Snapshot(context.Context, kvevents.Stream) (kvevents.Snapshot, error) {
	return s.snap, s.err
}

// TestSubscriberBootstrapsFromSnapshot: a stream starts from the engine's snapshot and
// resumes the live stream at its resume point; a resume point the live stream has
// passed is a gap (fail closed without replay); an engine without snapshots is replayed.
func TestSubscriberBootstrapsFromSnapshot(t *testing.T) {
	chain := kvindex.Batch{Events: []kvindex.Event{stored(0, 4, 100)}}
	peer, _ := kvindex.NewIndex(kvindex.IndexConfig{Seed: 77}) // a peer replica's index at seq 1
	peer.Apply("x", kvindex.Batch{Seq: 1, Events: chain.Events})
	state, err := peer.ExportStream("x", 0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		replay         bool
		snap           snapshotter
		atReady, after int    // tokens matched when ready, and after the live batch
		outcome        string // of loadaware_kvevents_snapshots_total
	}{
		{"snapshot, then live from its resume point", false, snapshotter{snap: kvevents.Snapshot{Epoch: "e1", Resume: 2, Batches: []kvindex.Batch{chain}}}, 4 * bs, 6 * bs, "applied"},
		{"a resume point behind the live stream is a gap", false, snapshotter{snap: kvevents.Snapshot{Epoch: "e1", Resume: 1, Batches: []kvindex.Batch{chain}}}, 4 * bs, 0, "applied"},
		{"a peer's index of the stream, then live", false, snapshotter{snap: kvevents.Snapshot{Resume: 2, State: &state}}, 4 * bs, 6 * bs, "applied"},
		{"a peer's index with a resume point not its own: replayed", true, snapshotter{snap: kvevents.Snapshot{Resume: 1, State: &state}}, 4 * bs, 6 * bs, "failed"},
		{"no snapshot served: replayed", true, snapshotter{err: kvevents.ErrNoSnapshot}, 4 * bs, 6 * bs, "none"},
		{"a failed snapshot: replayed", true, snapshotter{err: errors.New("refused")}, 4 * bs, 6 * bs, "failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pubs, eps, port, rport := engines(t, 1, tc.replay, kvevents.Layout{MapEvents: true})
			pubs[0].Skip([]kvindex.Event{stored(0, 2, 100)}) // before the subscriber: seq 0
			pubs[0].Skip([]kvindex.Event{stored(2, 4, 100)}) // seq 1
			r := newRig(t, eps, port, rport, func(c *kvevents.SubscriberConfig) { c.Snapshots = tc.snap })
			r.ready()
			if m := r.matched(eps[0]); m != tc.atReady {
				t.Errorf("at ready: %d tokens, want %d", m, tc.atReady)
			}
			subscribed(t, pubs)
			r.await(publish(t, pubs[0], stored(4, 6, 100))) // seq 2
			if m := r.matched(eps[0]); m != tc.after {
				t.Errorf("after the live batch: %d tokens, want %d", m, tc.after)
			}
			if n := r.counter("loadaware_kvevents_snapshots_total", "outcome", tc.outcome); n != 1 {
				t.Errorf("snapshots_total{outcome=%s} = %v, want 1", tc.outcome, n)
			}
		})
	}
}
