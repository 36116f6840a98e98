package live

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/vtime"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/kvevents"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/prometheus/client_golang/prometheus"
)

// freePorts returns n distinct TCP ports free on ip now (the test's /24 is its own, so no
// other test takes them before the engines bind them). The ports are held together until
// all are chosen: one closed before the next is asked for could be handed out again.
func freePorts(t *testing.T, ip string, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

func counterSum(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			ok := label == ""
			for _, l := range m.Label {
				ok = ok || (l.GetName() == label && l.GetValue() == value)
			}
			if ok {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestVLLMEventsAndLMCacheEventsDecideAlike runs simulated engines that report their
// LMCache CPU tier both ways at once (LMCache controller messages and vLLM KV events, as
// LMCache's multi-process mode publishes them), drives the same requests through them,
// and checks that a picker routing on either source makes the same decisions. Prompts are
// whole chunks: the vLLM format has no partial blocks (see KVEventsConfig). The CPU tier
// is small, so chunks are evicted and removals are exercised too.
func TestVLLMEventsAndLMCacheEventsDecideAlike(t *testing.T) {
	for _, l := range []kvevents.Layout{{}, {MapEvents: true, BytesHashes: true}} {
		t.Run(fmt.Sprintf("%+v", l), func(t *testing.T) { decideAlike(t, l) })
	}
}

func decideAlike(t *testing.T, layout kvevents.Layout) {
	const n, chunk = 3, 256
	prefix := fmt.Sprintf("127.%d.%d.", 100+rand.IntN(150), rand.IntN(256))
	model := fastModel()
	model.CPUTierBytes = int64(model.KVBytesPerToken()) * chunk * 8 // 8 chunks: evictions happen
	ips := make([]string, n)
	lis := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range ips {
		ips[i] = prefix + strconv.Itoa(i+1)
		var err error
		if lis[i], err = net.Listen("tcp", net.JoinHostPort(ips[i], "0")); err != nil {
			t.Fatal(err)
		}
		addrs[i] = lis[i].Addr().String()
	}
	ports := freePorts(t, ips[0], 2)
	pubPort, replayPort := ports[0], ports[1]
	keys := lmcache.KeyConfig{HashSeed: "123", ChunkSize: chunk}
	a, err := app.Start(context.Background(), app.Config{GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0",
		Endpoints: addrs, Policy: "loadaware", Beta: 1,
		LMCache:     &app.LMCacheConfig{PullAddr: "127.0.0.1:0", Keys: keys, Allow: lmcache.AllowFleet},
		CacheSource: picker.SourceBoth,
		KVEvents:    &app.KVEventsConfig{Port: pubPort, ReplayPort: replayPort, ReplayTimeout: 10 * time.Second},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	engines := make([]*Engine, n)
	for i := range engines {
		engines[i] = startEngine(t, EngineConfig{Model: model, IP: ips[i], Listener: lis[i], PullAddr: a.LMCachePullAddr(), Keys: keys,
			KVEvents: &KVEventsConfig{Port: pubPort, ReplayPort: replayPort, Layout: layout}})
	}
	select {
	case <-a.KVEventsSubscriber.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("the KV events subscriber did not finish its first replays")
	}
	for _, e := range engines {
		if err := e.WaitKVSubscribed(); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := poll(ctx, 10*time.Second, "LMCache registration", func() (bool, error) { return len(a.LMCacheIndex.Instances()) == n, nil }); err != nil {
		t.Fatal(err)
	}

	// Documents of 2 chunks shared by requests, each request adding a chunk of its own.
	rng := rand.New(rand.NewPCG(1, 2))
	doc := func(d int) []uint32 {
		out := make([]uint32, 2*chunk)
		for i := range out {
			out[i] = uint32(1000*d + i + 1)
		}
		return out
	}
	prompt := func(d, q int) []uint32 {
		p := append([]uint32(nil), doc(d)...)
		for i := 0; i < chunk; i++ {
			p = append(p, uint32(50000+q*chunk+i))
		}
		return p
	}
	idsOf := func(p []uint32) string {
		s := make([]string, len(p))
		for i, v := range p {
			s[i] = strconv.Itoa(int(v))
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	var sent [][]uint32
	for q := 0; q < 18; q++ {
		p := prompt(rng.IntN(5), q)
		e := engines[rng.IntN(n)]
		resp, body := post(t, "http://"+e.Addr()+"/v1/completions", `{"model":"m","prompt":`+idsOf(p)+`,"max_tokens":1}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		sent = append(sent, p)
	}
	err = poll(ctx, 20*time.Second, "events did not all reach the picker", func() (bool, error) {
		var emitted, batches int64
		for _, e := range engines {
			emitted += e.Emitted()
			batches += e.KVBatches()
		}
		lm := counterSum(t, a.Registry, "loadaware_lmcache_messages_total", "", "")
		kv := counterSum(t, a.Registry, "loadaware_kvevents_batches_total", "outcome", "applied")
		return lm >= float64(emitted) && kv >= float64(batches), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if removed := counterSum(t, a.Registry, "loadaware_kvevents_blocks_total", "outcome", kvindex.OutRemoved); removed == 0 {
		t.Fatal("no chunk was evicted: the test does not exercise removals")
	}

	pick := func(view picker.CacheView) *picker.Picker {
		s := fleet.New()
		s.Update(addrs)
		p, err := picker.New(picker.Options{Fleet: s, Policy: "loadaware", Cache: view})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	lmPick := pick(picker.LMCacheView{Index: a.LMCacheIndex})
	kvPick := pick(picker.KVEventsView{Index: a.KVEventsIndex})
	queries := append(sent, prompt(0, 100), prompt(1, 101), prompt(2, 102), prompt(3, 103), prompt(4, 104), doc(1), doc(3))
	credited := 0
	for qi, q := range queries {
		dl, err1 := lmPick.Pick(ctx, picker.Request{Tokens: q})
		dk, err2 := kvPick.Pick(ctx, picker.Request{Tokens: q})
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		dl.Booking.Release()
		dk.Booking.Release()
		strip := func(d picker.Decision) string {
			return strings.NewReplacer(" source=lmcache", "", " source=vllm-events", "").Replace(d.Explain())
		}
		if dl.Endpoints[0] != dk.Endpoints[0] || strip(dl) != strip(dk) {
			t.Errorf("query %d decided differently:\nLMCache:     %s\nvLLM events: %s", qi, dl.Explain(), dk.Explain())
		}
		for _, r := range dk.Ranked {
			credited += r.Matched
		}
	}
	if credited == 0 {
		t.Fatal("no query matched anything: the comparison is vacuous")
	}
}

// TestLiveOnVLLMEventsDecidesAsVirtualTime runs the seed of
// TestLiveAndVirtualTimeMakeTheSameDecisions live with the picker routing on the engines'
// vLLM KV events instead of LMCache messages, and compares each request's engine with
// virtual time's (which routes on the LMCache index).
func TestLiveOnVLLMEventsDecidesAsVirtualTime(t *testing.T) {
	cfg, seed, reqs := sequentialSeed(t)
	arm := experiment.Arm{Name: "loadaware-b1", Policy: "loadaware", Beta: 1}
	vt, err := vtime.RunRequests(context.Background(), cfg, arm, seed, reqs)
	if err != nil {
		t.Fatal(err)
	}
	lv, err := Run(context.Background(), cfg, arm, seed, Options{WarmUp: vtime.WarmUp, Requests: reqs, Sequential: true, CacheSource: picker.SourceVLLMEvents,
		Explain: func(int) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	fromEvents := 0
	for i, c := range choices(t, vt, lv) {
		if !c.same() {
			t.Errorf("request %d (prefix %d): virtual time (LMCache) chose engine %d, live on vLLM events engine %d (%s)", i, reqs[i].PrefixID, c.v, c.l, lv.Decisions[i])
		}
		if strings.Contains(lv.Decisions[i], "source=vllm-events") {
			fromEvents++
		}
	}
	if fromEvents == 0 {
		t.Error("no decision was credited from vLLM events: the comparison is vacuous")
	}
	if _, err := Run(context.Background(), fastSweep(), arm, seed, Options{WarmUp: vtime.WarmUp, Requests: reqs[:1], CacheSource: picker.SourceVLLMEvents}); err == nil || !strings.Contains(err.Error(), "warm-up of 0") {
		t.Errorf("a warm fleet on vLLM events: %v, want an error naming the warm-up", err)
	}
}
