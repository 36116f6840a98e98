package app

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/kvpublish"
	"github.com/loadaware/loadaware-epp/cachealarm"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/stackcheck"
	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// kvEngines starts n KV events publishers on loopback IPs of their own, all on one port
// (the picker subscribes to every endpoint's IP on one port).
func kvEngines(t *testing.T, n int) ([]*kvpublish.Publisher, []string, int) {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		pubs, hosts, port := []*kvpublish.Publisher{}, []string{}, 0
		for i := 0; i < n; i++ {
			host := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(150), rand.IntN(256), 1+i)
			p, err := kvpublish.NewPublisher(kvpublish.PublisherConfig{Addr: fmt.Sprintf("%s:%d", host, port), DPRank: -1})
			if err != nil {
				break
			}
			if port == 0 {
				_, ps, _ := net.SplitHostPort(p.Addr())
				fmt.Sscan(ps, &port)
			}
			pubs, hosts = append(pubs, p), append(hosts, host)
		}
		if len(pubs) == n {
			t.Cleanup(func() {
				for _, p := range pubs {
					p.Close()
				}
			})
			return pubs, hosts, port
		}
		for _, p := range pubs {
			p.Close()
		}
	}
	t.Fatal("no port free on every loopback IP")
	return nil, nil, 0
}

// route books and releases one decision for tokens on ep alone (the gateway's subset).
func route(t *testing.T, a *App, ep string, tokens []uint32) {
	t.Helper()
	d, err := a.Picker.Pick(context.Background(), picker.Request{Tokens: tokens, Subset: []string{ep}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Endpoints[0] != ep {
		t.Fatalf("routed to %s, want %s", d.Endpoints[0], ep)
	}
	d.Booking.Release()
}

// waitFor polls cond (the effect of a message on another socket, which has no signal)
// for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestCacheAlarmOnKVEvents drives two live engines publishing vLLM KV events and the real
// picker, one fake second a tick: a healthy fleet never alarms, and an engine whose
// events stop while prompts keep coming alarms exactly one window later, in the log
// line's metrics and in /admin/state.
func TestCacheAlarmOnKVEvents(t *testing.T) {
	const window = 10
	for _, tc := range []struct {
		name      string
		stopAt    int // fake second from which engine B publishes nothing; 0: never
		wantAlarm int // tick of B's first alarm; 0: none
	}{
		{name: "a healthy fleet never alarms", wantAlarm: 0},
		{name: "an engine whose events stop alarms within its window", stopAt: 6, wantAlarm: 6 + window - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pubs, hosts, port := kvEngines(t, 2)
			eps := []string{net.JoinHostPort(hosts[0], "8000"), net.JoinHostPort(hosts[1], "8000")}
			a := start(t, Config{Endpoints: eps, CacheSource: picker.SourceVLLMEvents, AdminToken: "tok",
				KVEvents:   &KVEventsConfig{Port: port},
				CacheAlarm: &CacheAlarmConfig{Window: window * time.Second, MinPrompts: 3, Every: -1}})
			for _, p := range pubs {
				if err := p.WaitSubscribed(10 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			t0 := time.Now()
			tokens := make([]uint32, 32)
			first := 0
			for sec := 1; sec <= 25; sec++ {
				for i, p := range pubs {
					if i == 1 && tc.stopAt > 0 && sec >= tc.stopAt {
						continue
					}
					for j := range tokens {
						tokens[j] = uint32(sec*100 + j)
					}
					seq, err := p.Publish([]kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{uint64(sec)}, Tokens: tokens[:16], BlockSize: 16, Medium: "GPU"}})
					if err != nil {
						t.Fatal(err)
					}
					waitFor(t, "batch received", func() bool {
						for _, s := range a.State(time.Now()).KVEvents.Streams {
							if s.Endpoint == eps[i] && s.Seq == seq {
								return true
							}
						}
						return false
					})
				}
				for _, ep := range eps {
					route(t, a, ep, tokens)
				}
				for _, al := range a.TickCacheAlarm(t0.Add(time.Duration(sec) * time.Second)) {
					if al.Endpoint != eps[1] || al.Reason != cachealarm.ReasonSilent {
						t.Fatalf("second %d: alarm %+v, only %s may be in alarm (silent)", sec, al, eps[1])
					}
					if first == 0 {
						first = sec
					}
				}
			}
			if first != tc.wantAlarm {
				t.Fatalf("B's first alarm at fake second %d, want %d", first, tc.wantAlarm)
			}
			if got := a.CacheAlarm.States()[0].Prompts; got != 25 {
				t.Fatalf("A was routed %d prompts, want 25", got)
			}
			_, metrics := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/metrics", "", "")
			wantLine := fmt.Sprintf("loadaware_cache_signal_dead{endpoint=%q} 1", eps[1])
			if strings.Contains(metrics, wantLine) != (tc.wantAlarm > 0) {
				t.Fatalf("/metrics has %q: %v, want %v", wantLine, !(tc.wantAlarm > 0), tc.wantAlarm > 0)
			}
			code, body := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/admin/state", "tok", "")
			var st stackcheck.PickerState
			if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
				t.Fatalf("/admin/state = %d %v: %s", code, err, body)
			}
			var got string // States are sorted by address, which need not put B second
			for _, e := range st.Alarm.Endpoints {
				if e.Endpoint == eps[1] {
					got = e.Reason
				}
			}
			if (got == cachealarm.ReasonSilent) != (tc.wantAlarm > 0) {
				t.Fatalf("/admin/state says B's alarm is %q", got)
			}
		})
	}
}

// TestCacheAlarmOnLMCache: an engine's LMCache worker pushing over real ZeroMQ keeps its
// endpoint quiet; once it stops, the alarm fires one window later. /admin/state reports
// the controller and the instance, /admin/lookup what the picker credits.
func TestCacheAlarmOnLMCache(t *testing.T) {
	keys := lmcache.KeyConfig{HashSeed: "123", ChunkSize: 16, Format: lmcache.KeyFormatV03}
	ep := "127.0.0.2:8002"
	a := start(t, Config{Endpoints: []string{ep}, AdminToken: "tok",
		LMCache:    &LMCacheConfig{PullAddr: "127.0.0.1:0", ReplyAddr: "127.0.0.1:0", Keys: keys, Allow: lmcache.AllowFleet},
		Tokenizer:  idsTokenizer{},
		CacheAlarm: &CacheAlarmConfig{Window: 5 * time.Second, MinPrompts: 2, Every: -1}})
	h, err := lmcache.NewHasher(keys)
	if err != nil {
		t.Fatal(err)
	}
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	push, err := zctx.NewSocket(zmq.PUSH)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		push.Close()
		_ = zctx.Term()
	}()
	if err := push.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := push.Connect("tcp://127.0.0.2:0;" + a.LMCachePullAddr()); err != nil {
		t.Fatal(err)
	}
	send := func(msgs ...lmcache.Message) {
		var batch [][]byte
		for _, m := range msgs {
			b, err := lmcache.Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, b)
		}
		if _, err := push.SendMessage(batch); err != nil {
			t.Fatal(err)
		}
	}
	url := "127.0.0.2:30081"
	send(lmcache.RegisterMsg{InstanceID: "vllm-b", WorkerID: 0, IP: "127.0.0.2", Port: 8002, DistributedURL: &url})
	waitFor(t, "registration", func() bool { return len(a.LMCacheIndex.Instances()) == 1 })
	t0 := time.Now()
	a.TickCacheAlarm(t0) // learns which IPs are credited
	first := 0
	for sec := 1; sec <= 12; sec++ {
		tokens := make([]uint32, 32)
		for j := range tokens {
			tokens[j] = uint32(sec*100 + j)
		}
		if sec <= 4 {
			before := a.CacheAlarm.States()[0].Signals
			send(lmcache.KVAdmitMsg{InstanceID: "vllm-b", WorkerID: 0, Key: h.ChunkKeys(tokens)[0], Location: "LocalCPUBackend"})
			waitFor(t, "admit counted", func() bool {
				a.TickCacheAlarm(t0.Add(time.Duration(sec) * time.Second))
				return a.CacheAlarm.States()[0].Signals > before
			})
		}
		route(t, a, ep, tokens)
		if al := a.TickCacheAlarm(t0.Add(time.Duration(sec) * time.Second)); len(al) > 0 && first == 0 {
			if al[0].Reason != cachealarm.ReasonSilent {
				t.Fatalf("alarm %+v, want silent", al[0])
			}
			first = sec
		}
	}
	if first != 4+5 {
		t.Fatalf("first alarm at fake second %d, want 9 (last admit at 4, window 5s)", first)
	}

	code, body := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/admin/state", "tok", "")
	var st stackcheck.PickerState
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("/admin/state = %d %v: %s", code, err, body)
	}
	if st.CacheSource != "lmcache" || st.LMCache == nil || st.LMCache.HashSeed != "123" || st.LMCache.ChunkSize != 16 ||
		st.LMCache.PullPort == 0 || len(st.LMCache.Instances) != 1 || st.LMCache.Instances[0].IP != "127.0.0.2" ||
		st.LMCache.Instances[0].State != "active" {
		t.Fatalf("/admin/state = %s", body)
	}
	for _, tc := range []struct {
		name, token, body string
		code              int
		matched           int
	}{
		{"without the token", "", `{"prompt":"x"}`, 401, 0},
		{"a held prompt", "tok", `{"prompt":"401,402"}`, 200, 16},
		{"a prompt nobody holds", "tok", `{"prompt":"7,8"}`, 200, 0},
		{"held token ids, no tokenizer involved", "tok", `{"prompt":[` + idList(400, 32) + `]}`, 200, 16},
		{"token ids nobody holds", "tok", `{"prompt":[` + idList(700, 32) + `]}`, 200, 0},
		{"a prompt neither text nor ids", "tok", `{"prompt":{"a":1}}`, 400, 0},
		{"neither prompt nor messages", "tok", `{}`, 400, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := httpDo(t, "POST", "http://"+a.MetricsAddr()+"/admin/lookup", tc.token, tc.body)
			if code != tc.code {
				t.Fatalf("/admin/lookup = %d %s, want %d", code, body, tc.code)
			}
			if code != 200 {
				return
			}
			var l stackcheck.Lookup
			if err := json.Unmarshal([]byte(body), &l); err != nil || l.Matched[ep] != tc.matched {
				t.Fatalf("/admin/lookup = %s (%v), want %d matched on %s", body, err, tc.matched, ep)
			}
		})
	}
	if code, _ := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/admin/state", "wrong", ""); code != 401 {
		t.Fatalf("/admin/state with a wrong token = %d, want 401", code)
	}
}

// idsTokenizer reads a prompt written as comma-separated ids, and expands "A,B" to the
// 32 ids A-1+... so a test can name a prompt held in the index: "401,402" is sec 4's.
type idsTokenizer struct{}

func (idsTokenizer) Tokenize(_ context.Context, r picker.Request, _ []string) ([]uint32, error) {
	var a, b uint32
	if _, err := fmt.Sscanf(r.Prompt, "%d,%d", &a, &b); err != nil {
		return nil, err
	}
	out := make([]uint32, 32)
	for i := range out {
		out[i] = a - 1 + uint32(i)
	}
	return out, nil
}

// fixedTokenizer gives every prompt the same ids.
type fixedTokenizer []uint32

func (f fixedTokenizer) Tokenize(context.Context, picker.Request, []string) ([]uint32, error) {
	return append([]uint32(nil), f...), nil
}

// TestTokenizerParityFeedsTheAlarm: an engine whose /tokenize differs from the picker's ids
// (text or chat) goes into alarm at the next tick, one that agrees does not, and one that
// cannot be asked keeps no sample; each sample is counted by outcome.
func TestTokenizerParityFeedsTheAlarm(t *testing.T) {
	engine := func(text, chat string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var in struct{ Messages json.RawMessage }
			_ = json.NewDecoder(r.Body).Decode(&in)
			if in.Messages != nil {
				fmt.Fprint(w, chat)
				return
			}
			fmt.Fprint(w, text)
		}))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	same := engine(`{"tokens":[1,2,3]}`, `{"tokens":[1,2,3]}`)
	otherChat := engine(`{"tokens":[1,2,3]}`, `{"tokens":[1,2,4]}`)
	broken := engine(`not json`, `not json`)
	a := start(t, Config{Endpoints: []string{same, otherChat, broken}, Tokenizer: fixedTokenizer{1, 2, 3},
		CacheAlarm: &CacheAlarmConfig{Every: -1, ParityInterval: time.Hour}})
	a.SampleParity(context.Background(), "m", time.Second)
	alarms := a.TickCacheAlarm(time.Now())
	if len(alarms) != 1 || alarms[0].Endpoint != otherChat || alarms[0].Reason != cachealarm.ReasonTokenizer {
		t.Fatalf("alarms %+v, want %s alone (tokenizer)", alarms, otherChat)
	}
	for _, s := range a.CacheAlarm.States() {
		if (s.Parity == nil) != (s.Endpoint == broken) {
			t.Errorf("%s: parity sample %+v", s.Endpoint, s.Parity)
		}
	}
	for outcome, want := range map[string]float64{"equal": 1, "differs": 1, "error": 1} {
		if got := testutil.ToFloat64(a.obs.parity.WithLabelValues(outcome)); got != want {
			t.Errorf("parity samples %s = %v, want %v", outcome, got, want)
		}
	}
}

// idList is n consecutive ids from first, comma-separated (a JSON array's inside).
func idList(first, n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = strconv.Itoa(first + i)
	}
	return strings.Join(s, ",")
}
