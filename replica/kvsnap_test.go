package replica

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/bench/kvpublish"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/kvevents"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/prometheus/client_golang/prometheus"
)

const kvBS = 16

// kvEngine is one engine's KV events publisher on loopback, with replay.
type kvEngine struct {
	pub         *kvpublish.Publisher
	endpoint    string
	port, rport int
}

func startKVEngine(t testing.TB, bufferSteps int) *kvEngine {
	t.Helper()
	p, err := kvpublish.NewPublisher(kvpublish.PublisherConfig{Addr: "127.0.0.1:0", ReplayAddr: "127.0.0.1:0", DPRank: 0, BufferSteps: bufferSteps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	port := func(addr string) int {
		_, ps, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(ps)
		return n
	}
	return &kvEngine{pub: p, endpoint: "127.0.0.1:8000", port: port(p.Addr()), rport: port(p.ReplayAddr())}
}

// kvPrompt is prompt i: 6 blocks, the first two shared by every prompt.
func kvPrompt(i int) []uint32 {
	p := make([]uint32, 6*kvBS)
	for j := range p {
		p[j] = uint32(j)
		if j >= 2*kvBS {
			p[j] = uint32(100000*(i+1) + j)
		}
	}
	return p
}

// kvBatch is batch i of the engine's history: it stores prompt i's chain, and every
// third batch also removes the last two blocks of the prompt stored two batches before.
func kvBatch(i int) []kvindex.Event {
	hashes := func(i int) []uint64 {
		hs := make([]uint64, 6)
		for j := range hs {
			hs[j] = uint64(1000*(i+1) + j)
			if j < 2 {
				hs[j] = uint64(j + 1) // the shared blocks hash alike
			}
		}
		return hs
	}
	evs := []kvindex.Event{{Kind: kvindex.BlockStored, BlockSize: kvBS, Tokens: kvPrompt(i), Hashes: hashes(i), Medium: "GPU"}}
	if i%3 == 2 {
		evs = append(evs, kvindex.Event{Kind: kvindex.BlockRemoved, Hashes: hashes(i - 2)[4:], Medium: "GPU"})
	}
	return evs
}

// kvNode is one picker's KV events parts: its index, subscriber and replica.
type kvNode struct {
	ix   *kvindex.Index
	sub  *kvevents.Subscriber
	reg  *prometheus.Registry
	last atomic.Int64  // the highest batch handled
	seen chan struct{} // signalled after each batch handled
	r    *Replica
}

// startKVNode starts a picker following e; with url, as a replica taking its streams
// from its peers, else alone (the engine's replay only). With peered, a peer runs: the
// replica waits for its state however long a loaded host takes to deliver it, and keeps
// it as a peer for seconds of silence; without, it gives up waiting after 60 ms.
func startKVNode(t testing.TB, url string, e *kvEngine, peered bool) *kvNode {
	t.Helper()
	n := &kvNode{reg: prometheus.NewRegistry(), seen: make(chan struct{}, 1)}
	n.last.Store(-1)
	n.ix, _ = kvindex.NewIndex(kvindex.IndexConfig{})
	cfg := kvevents.SubscriberConfig{Port: e.port, ReplayPort: e.rport, PollInterval: 10 * time.Millisecond, ReplayTimeout: 5 * time.Second,
		Registerer: n.reg, OnBatch: func(_ string, seq int64) {
			for last := n.last.Load(); seq > last && !n.last.CompareAndSwap(last, seq); last = n.last.Load() {
			}
			select {
			case n.seen <- struct{}{}:
			default:
			}
		}}
	var snaps *KVSnapshots
	if url != "" {
		snaps = NewKVSnapshots()
		cfg.Snapshots = snaps
	}
	var err error
	if n.sub, err = kvevents.NewSubscriber(cfg, n.ix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	n.sub.SetEndpoints([]string{e.endpoint})
	if url != "" {
		f := fleet.New()
		f.Update([]string{e.endpoint})
		rc := Config{URL: url, Fleet: f, KVEvents: n.ix, KVSnapshots: snaps, ScrapeInterval: -1,
			StateInterval: 20 * time.Millisecond, PeerTimeout: 200 * time.Millisecond, PeerWait: 50 * time.Millisecond}
		if peered {
			rc.PeerWait, rc.PeerTimeout = time.Hour, 5*time.Second
		}
		n.r, err = Start(context.Background(), rc)
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-n.sub.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber's first sync did not end")
	}
	return n
}

// close stops the node; it is idempotent.
func (n *kvNode) close() {
	if n.r != nil {
		_ = n.r.Close()
		n.r = nil
	}
	_ = n.sub.Close()
}

// await waits until the node has handled batch seq.
func (n *kvNode) await(t testing.TB, seq int64) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for n.last.Load() < seq {
		select {
		case <-n.seen:
		case <-timeout:
			t.Fatalf("batch %d not handled", seq)
		}
	}
}

// snapshots returns loadaware_kvevents_snapshots_total{outcome}.
func (n *kvNode) snapshots(outcome string) float64 {
	mfs, _ := n.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "loadaware_kvevents_snapshots_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func (n *kvNode) matches(ep string, prompts int) []kvindex.Match {
	var out []kvindex.Match
	for i := range prompts {
		out = append(out, n.ix.Match(kvPrompt(i), []string{ep})...)
	}
	return out
}

// TestKVEventsWarmStartFromAPeer: a starting replica takes an engine's stream from a
// peer's KV events index (a real NATS server, a real ZeroMQ publisher), answers every
// lookup as the peer, and applies the live batches after the snapshot exactly once. With
// a replay buffer that covers the engine's whole history a replay-built index answers
// the same; with a short one (vLLM's buffer_steps) it has lost what fell out of the
// buffer, while the peer's snapshot has not.
func TestKVEventsWarmStartFromAPeer(t *testing.T) {
	for _, tc := range []struct {
		name         string
		bufferSteps  int
		replayAgrees bool
	}{
		{"the replay buffer holds the whole history", 1000, true},
		{"the replay buffer holds the last 4 batches", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := startNATS(t)
			e := startKVEngine(t, tc.bufferSteps)
			a := startKVNode(t, url, e, false)
			if err := e.pub.WaitSubscribed(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			if got := a.snapshots("none"); got != 1 {
				t.Errorf("the first replica: snapshots{none} = %v, want 1 (no peer: replayed)", got)
			}
			const first, total = 20, 30
			var seq int64
			for i := range first {
				seq = publishKV(t, e, i)
			}
			a.await(t, seq)
			b := startKVNode(t, url, e, true)
			if got := b.snapshots("applied"); got != 1 {
				t.Errorf("the starting replica: snapshots{applied} = %v, want 1", got)
			}
			if got, want := b.ix.KeySpace(), a.ix.KeySpace(); got != want {
				t.Errorf("key space %#x, the peer's %#x", got, want)
			}
			if diff := cmp.Diff(a.matches(e.endpoint, first), b.matches(e.endpoint, first)); diff != "" {
				t.Fatalf("after the warm start (-peer +started):\n%s", diff)
			}
			if err := e.pub.WaitSubscribed(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			for i := first; i < total; i++ {
				seq = publishKV(t, e, i)
			}
			a.await(t, seq)
			b.await(t, seq)
			want := a.matches(e.endpoint, total)
			if diff := cmp.Diff(want, b.matches(e.endpoint, total)); diff != "" {
				t.Errorf("after the live batches (-peer +started):\n%s", diff)
			}
			if held := want[1].Matched; held != 6*kvBS { // prompt 1 is never removed
				t.Fatalf("prompt 1 held %d tokens in the peer, want %d: the history is not what the test means", held, 6*kvBS)
			}
			c := startKVNode(t, "", e, false) // replay only
			if diff := cmp.Diff(want, c.matches(e.endpoint, total)); (diff == "") != tc.replayAgrees {
				t.Errorf("replay-built index agrees with the peer: %v, want %v (-peer +replayed):\n%s", diff == "", tc.replayAgrees, diff)
			}
		})
	}
}

func publishKV(t testing.TB, e *kvEngine, i int, batch ...func(int) []kvindex.Event) int64 {
	t.Helper()
	mk := kvBatch
	if len(batch) > 0 {
		mk = batch[0]
	}
	seq, err := e.pub.Publish(mk(i))
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// BenchmarkKVWarmStart measures a starting replica's time to a ready KV events index of
// one engine stream holding blocks blocks (64-block chains, one a batch): taken from a
// peer's index over NATS (snapshot), or rebuilt from the engine's replay over ZeroMQ
// (replay, vLLM's buffer holding the whole history). Each iteration starts a picker and
// checks that it answers a lookup as the peer.
func BenchmarkKVWarmStart(b *testing.B) {
	for _, blocks := range []int{10_000, 100_000} {
		url := startNATS(b)
		e := startKVEngine(b, blocks/64+1)
		peer := startKVNode(b, url, e, false)
		if err := e.pub.WaitSubscribed(10 * time.Second); err != nil {
			b.Fatal(err)
		}
		var seq int64
		for c := range blocks / 64 {
			ev := kvindex.Event{Kind: kvindex.BlockStored, BlockSize: kvBS, Tokens: make([]uint32, 64*kvBS), Medium: "GPU"}
			for j := range ev.Tokens {
				ev.Tokens[j] = uint32(c*64*kvBS + j)
			}
			for j := range 64 {
				ev.Hashes = append(ev.Hashes, uint64(c*64+j+1))
			}
			seq = publishKV(b, e, c, func(int) []kvindex.Event { return []kvindex.Event{ev} })
		}
		peer.await(b, seq)
		probe := make([]uint32, 64*kvBS)
		for j := range probe {
			probe[j] = uint32(j)
		}
		want := peer.ix.Match(probe, []string{e.endpoint})
		for _, mode := range []string{"snapshot", "replay"} {
			b.Run(fmt.Sprintf("blocks=%d/%s", blocks, mode), func(b *testing.B) {
				for b.Loop() {
					u := url
					if mode == "replay" {
						u = ""
					}
					n := startKVNode(b, u, e, mode == "snapshot")
					if got := n.ix.Match(probe, []string{e.endpoint}); !cmp.Equal(got, want) || n.ix.Blocks() != peer.ix.Blocks() {
						b.Fatalf("%s: %+v and %d blocks, the peer %+v and %d", mode, got, n.ix.Blocks(), want, peer.ix.Blocks())
					}
					n.close()
				}
			})
		}
	}
}

// TestKVSnapshotsWithoutAPeerStream: a peer without a KV events index, or without the
// stream, answers at once, and the starter falls back to the replay (ErrNoSnapshot)
// without waiting for its deadline; a peer with another stream still gives its key space.
func TestKVSnapshotsWithoutAPeerStream(t *testing.T) {
	url := startNATS(t)
	start := func(ix *kvindex.Index, snaps *KVSnapshots) *Replica {
		f := fleet.New()
		f.Update(endpoints)
		r, err := Start(context.Background(), Config{URL: url, Fleet: f, KVEvents: ix, KVSnapshots: snaps, ScrapeInterval: -1,
			StateInterval: 20 * time.Millisecond, PeerTimeout: 200 * time.Millisecond, PeerWait: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		<-r.Ready()
		return r
	}
	start(nil, nil) // an LMCache-only peer
	other, _ := kvindex.NewIndex(kvindex.IndexConfig{Seed: 99})
	other.Apply("10.0.0.9:8000", kvindex.Batch{Events: kvBatch(1)})
	start(other, nil) // a peer with another engine's stream
	ix, _ := kvindex.NewIndex(kvindex.IndexConfig{})
	snaps := NewKVSnapshots()
	r := start(ix, snaps)
	eventually(t, "both peers heard", func() bool { return len(r.load.peersNewestFirst()) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	_, err := snaps.Snapshot(ctx, kvevents.Stream{Endpoint: endpoints[0], Host: "10.0.0.1"})
	if !errors.Is(err, kvevents.ErrNoSnapshot) {
		t.Fatalf("Snapshot: %v, want ErrNoSnapshot", err)
	}
	// Two loopback round trips answer at once; waiting for a peer lasts until the deadline.
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("the answer took %s: a peer was waited for", took)
	}
	if got := ix.KeySpace(); got != 99 {
		t.Errorf("key space %d, want the peer's 99", got)
	}
}
