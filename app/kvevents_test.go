package app

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/kvpublish"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/picker"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// kvEngine starts a vLLM-shaped KV events publisher with replay on a loopback IP of its own.
func kvEngine(t *testing.T) (*kvpublish.Publisher, string) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		host := fmt.Sprintf("127.%d.%d.1", 100+rand.IntN(150), rand.IntN(256))
		p, err := kvpublish.NewPublisher(kvpublish.PublisherConfig{Addr: host + ":0", ReplayAddr: host + ":0", DPRank: -1})
		if err == nil {
			t.Cleanup(func() { p.Close() })
			return p, host
		}
		if attempt == 5 {
			t.Fatal(err)
		}
	}
}

func port(t *testing.T, addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// TestKVEventsIndexRebuiltBeforeServing: a picker started after its engines serves only
// once their replays are in the index, and its first decision already uses them.
func TestKVEventsIndexRebuiltBeforeServing(t *testing.T) {
	pub, host := kvEngine(t)
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(1000 + i)
	}
	if _, err := pub.Publish([]kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{1, 2, 3}, Tokens: tokens[:48], BlockSize: 16, Medium: "GPU"}}); err != nil {
		t.Fatal(err)
	}
	ep := net.JoinHostPort(host, "8000")
	a := start(t, Config{Endpoints: []string{ep, "10.0.0.9:8000"}, CacheSource: picker.SourceVLLMEvents,
		KVEvents: &KVEventsConfig{Port: port(t, pub.Addr()), ReplayPort: port(t, pub.ReplayAddr()), ReplayTimeout: 5 * time.Second}})
	conn, err := grpc.NewClient(a.HealthAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	if got := a.KVEventsIndex.Match(tokens, []string{ep})[0].Matched; got != 48 {
		t.Fatalf("at SERVING the index holds %d tokens for %s, want the replayed 48", got, ep)
	}
	d, err := a.Picker.Pick(context.Background(), picker.Request{Tokens: tokens, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	d.Booking.Release()
	if ex := d.Explain(); !strings.Contains(ex, "winner="+ep) || !strings.Contains(ex, "matched=48 source=vllm-events") {
		t.Errorf("first decision: %s", ex)
	}
	if code, _ := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/readyz", "", ""); code != 200 {
		t.Errorf("readyz = %d after SERVING", code)
	}
}

// TestKVEventsNotReadyWhileReplaying: with a replay port that does not answer, /readyz
// says why it is not ready until the replay times out.
func TestKVEventsNotReadyWhileReplaying(t *testing.T) {
	a := start(t, Config{Endpoints: []string{"127.0.0.1:8000"}, CacheSource: picker.SourceVLLMEvents,
		KVEvents: &KVEventsConfig{Port: 1, ReplayPort: 2, ReplayTimeout: time.Minute}})
	code, body := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/readyz", "", "")
	if code != 503 || !strings.Contains(body, "replay") {
		t.Errorf("readyz during the first replay = %d %q", code, body)
	}
}

func TestKVEventsBothNeedsLMCache(t *testing.T) {
	_, err := Start(context.Background(), Config{GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0",
		CacheSource: picker.SourceBoth, KVEvents: &KVEventsConfig{}}, nil)
	if err == nil || !strings.Contains(err.Error(), "--lmcache-pull-port") {
		t.Errorf("Start = %v, want an error naming --lmcache-pull-port", err)
	}
}

// TestKVEventsStartFailureStopsTheSubscriber: a start that fails after the endpoint set
// is known (here a taken metrics port) leaves no subscriber loop behind (goleak checks).
func TestKVEventsStartFailureStopsTheSubscriber(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = Start(context.Background(), Config{GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: taken.Addr().String(),
		Endpoints: []string{"127.0.0.1:8000"}, CacheSource: picker.SourceVLLMEvents, KVEvents: &KVEventsConfig{Port: 1}}, nil)
	if err == nil || !strings.Contains(err.Error(), "--metrics-port") {
		t.Fatalf("Start = %v, want the taken metrics port named", err)
	}
}

// TestKVEventsTakenFromAPeerReplica: a replica started after its engine's replay buffer
// has moved on takes the engine's stream from its peer (--nats-url), so its index holds
// what a replay no longer can (decision 0850).
func TestKVEventsTakenFromAPeerReplica(t *testing.T) {
	ns := startNATS(t)
	host := fmt.Sprintf("127.%d.%d.1", 100+rand.IntN(150), rand.IntN(256))
	pub, err := kvpublish.NewPublisher(kvpublish.PublisherConfig{Addr: host + ":0", ReplayAddr: host + ":0", DPRank: -1, BufferSteps: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	ep := net.JoinHostPort(host, "8000")
	cfg := Config{Endpoints: []string{ep}, CacheSource: picker.SourceVLLMEvents,
		KVEvents: &KVEventsConfig{Port: port(t, pub.Addr()), ReplayPort: port(t, pub.ReplayAddr()), ReplayTimeout: 5 * time.Second},
		// A peer timeout of seconds: the started replica asks only the peers it has heard
		// lately, and a loaded -race host can leave 200 ms between two of a peer's states.
		// The first replica has no peer: it gives up waiting for one at once.
		Replicas: &ReplicaConfig{URL: ns.ClientURL(), StateInterval: 20 * time.Millisecond, PeerTimeout: 5 * time.Second, ScrapeInterval: -1,
			PeerWait: time.Millisecond}}
	a := start(t, cfg)
	<-a.replicaReady()
	<-a.kvEventsReady() // its replay done: what follows is applied live
	if err := pub.WaitSubscribed(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	prompt := func(i int) []uint32 {
		p := make([]uint32, 32)
		for j := range p {
			p[j] = uint32(1000*(i+1) + j)
		}
		return p
	}
	const batches = 6 // the buffer keeps the last 2
	for i := range batches {
		if _, err := pub.Publish([]kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{uint64(10 * i), uint64(10*i + 1)}, Tokens: prompt(i), BlockSize: 16, Medium: "GPU"}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < batches; {
		if a.KVEventsIndex.Match(prompt(i), []string{ep})[0].Matched == 32 {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatal("the first replica did not apply the live batches")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The second replica has one: it waits until it hears it (the wait's default, 500 ms,
	// can pass on a loaded -race host before the peer's first state arrives; the check
	// below bounds the whole start).
	rc := *cfg.Replicas
	rc.PeerWait = time.Hour
	cfg.Replicas = &rc
	b := start(t, cfg)
	select {
	case <-b.kvEventsReady():
	case <-time.After(10 * time.Second):
		t.Fatal("the second replica's KV events did not sync")
	}
	_, body := httpDo(t, "GET", "http://"+b.MetricsAddr()+"/metrics", "", "")
	if !strings.Contains(body, `loadaware_kvevents_snapshots_total{outcome="applied"} 1`) {
		t.Error("the started replica did not count its stream taken from the peer")
	}
	for i := range batches {
		if got := b.KVEventsIndex.Match(prompt(i), []string{ep})[0].Matched; got != 32 {
			t.Errorf("prompt %d (batch %d): the started replica holds %d tokens, its peer 32", i, i, got)
		}
	}
}

// startNATS starts an embedded NATS server on a free loopback port for the replica tests;
// it is shut down when the test ends.
func startNATS(t *testing.T) *natsserver.Server {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}
