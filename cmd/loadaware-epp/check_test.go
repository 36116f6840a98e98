package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/kvpublish"
	"github.com/loadaware/loadaware-epp/internal/testnet"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/tokenize"
	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// qwen is the real Qwen2.5 tokenizer of testdata/ext (make testdata), loaded once.
var qwen = sync.OnceValues(func() (*tokenize.Tokenizer, error) { return tokenize.Load("../../testdata/ext/qwen2_5") })

func loadQwen(t *testing.T) *tokenize.Tokenizer {
	t.Helper()
	tok, err := qwen()
	if err != nil {
		t.Skipf("the Qwen2.5 tokenizer is not available (run make testdata): %v", err)
	}
	return tok
}

// engine is a vLLM-shaped test engine on a loopback IP of its own: /health, /metrics,
// /v1/models, /tokenize and /v1/completions, whose prompts it reports as LMCache admits
// (real ZeroMQ PUSH to the picker) or vLLM KV events (real ZeroMQ PUB).
type engine struct {
	t      *testing.T
	host   string
	srv    *httptest.Server
	tok    *tokenize.Tokenizer
	hasher *lmcache.Hasher // nil: no LMCache
	push   *zmq.Socket
	pub    *kvpublish.Publisher // nil: no KV events
	silent bool                 // publish no KV events
	vocab  uint32               // added to every id
	apiKey string               // vLLM's --api-key: its /v1 paths answer 401 without it
	mu     sync.Mutex
	hash   uint64
}

// engineSpec is how one engine of a stack is (mis)configured.
type engineSpec struct {
	seed   string // its LMCache PYTHONHASHSEED; "" = the picker's
	vocab  uint32 // added to every id it computes: another model's vocabulary
	silent bool   // its KV event stream stays silent
	dead   bool   // it is stopped before the check
	apiKey string // it runs with vLLM's --api-key
}

func (e *engine) addr() string { return e.srv.Listener.Addr().String() }

func (e *engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e.apiKey != "" && strings.HasPrefix(r.URL.Path, "/v1") && r.Header.Get("Authorization") != "Bearer "+e.apiKey {
		http.Error(w, `{"error":"Unauthorized"}`, http.StatusUnauthorized) // as vLLM's api-key middleware
		return
	}
	switch r.URL.Path {
	case "/health":
	case "/metrics":
		fmt.Fprintln(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\nvllm:num_requests_waiting 0")
	case "/v1/models":
		fmt.Fprintln(w, `{"object":"list","data":[{"id":"test-model","object":"model"}]}`)
	case "/tokenize":
		body, _ := io.ReadAll(r.Body)
		ids, err := e.ids(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"tokens": ids, "count": len(ids)})
	case "/v1/completions":
		body, _ := io.ReadAll(r.Body)
		ids, err := e.ids(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		e.cache(ids)
		fmt.Fprintln(w, `{"choices":[{"text":"x"}]}`)
	default:
		http.NotFound(w, r)
	}
}

// ids tokenizes a /tokenize or /v1/completions body as vLLM does.
func (e *engine) ids(body []byte) ([]uint32, error) {
	var in struct {
		Prompt   string          `json:"prompt"`
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	ids := e.tok.Encode(in.Prompt, true)
	if in.Messages != nil {
		var err error
		if ids, err = e.tok.EncodeChat(body); err != nil {
			return nil, err
		}
	}
	for i := range ids {
		ids[i] += e.vocab
	}
	return ids, nil
}

// cache reports a prefilled prompt as the engine's cache layer would.
func (e *engine) cache(ids []uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hasher != nil {
		var batch [][]byte
		for _, k := range e.hasher.ChunkKeys(ids) {
			b, err := lmcache.Encode(lmcache.KVAdmitMsg{InstanceID: "vllm-" + e.host, Key: k, Location: "LocalCPUBackend"})
			if err != nil {
				e.t.Error(err)
				return
			}
			batch = append(batch, b)
		}
		if _, err := e.push.SendMessage(batch); err != nil {
			e.t.Error(err)
		}
	}
	if e.pub != nil && !e.silent {
		n := len(ids) / 16
		hashes := make([]uint64, n)
		for i := range hashes {
			e.hash++
			hashes[i] = e.hash
		}
		if _, err := e.pub.Publish([]kvindex.Event{{Kind: kvindex.BlockStored, Hashes: hashes, Tokens: ids[:n*16], BlockSize: 16, Medium: "GPU"}}); err != nil {
			e.t.Error(err)
		}
	}
}

// stack is a picker and its engines, all live on loopback IPs.
type stack struct {
	picker  *app.App
	engines []*engine
	gateway string // a gateway stand-in: each completion decided by the picker, sent to its choice
}

const seed = "123"

// newStack starts engines as specified and the real picker in front of them, with the
// given cache source. unexposed binds the LMCache controller on another loopback IP than
// the metrics port, so the check cannot reach it while the engines can.
func newStack(t *testing.T, source string, specs []engineSpec, unexposed bool) *stack {
	t.Helper()
	base := loadQwen(t)
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{}
	net16 := fmt.Sprintf("127.%d.%d.", 100+rand.IntN(150), rand.IntN(256))
	ctlHost := "127.0.0.1"
	if unexposed {
		ctlHost = net16 + "200"
	}
	kvPort := 0
	if source != picker.SourceLMCache {
		kvPort = freePortOn(t, net16, len(specs))
	}
	var eps []string
	for i, sp := range specs {
		e := &engine{t: t, host: net16 + strconv.Itoa(i+1), tok: base, silent: sp.silent, vocab: sp.vocab, apiKey: sp.apiKey}
		// A dead engine's port keeps refusing (no parallel test's server can take it).
		e.srv = &httptest.Server{Listener: testnet.Listen(t, e.host), Config: &http.Server{Handler: e}}
		e.srv.Start()
		t.Cleanup(e.srv.Close)
		if kvPort != 0 {
			if e.pub, err = kvpublish.NewPublisher(kvpublish.PublisherConfig{Addr: fmt.Sprintf("%s:%d", e.host, kvPort), DPRank: -1}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.pub.Close() })
		}
		eps = append(eps, e.addr())
		s.engines = append(s.engines, e)
	}
	cfg := app.Config{GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0", Endpoints: eps, Policy: "loadaware", Beta: 1,
		AdminToken: "tok", Tokenizer: &picker.Tokens{Local: base}, CacheSource: source,
		CacheAlarm: &app.CacheAlarmConfig{Every: -1}}
	keys := lmcache.KeyConfig{HashSeed: seed, ChunkSize: 64, Format: lmcache.KeyFormatV03}
	if source != picker.SourceVLLMEvents {
		cfg.LMCache = &app.LMCacheConfig{PullAddr: ctlHost + ":0", ReplyAddr: ctlHost + ":0", Keys: keys, Allow: lmcache.AllowFleet}
	}
	if kvPort != 0 {
		cfg.KVEvents = &app.KVEventsConfig{Port: kvPort}
	}
	a, err := app.Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.picker = a
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	for i, sp := range specs {
		e := s.engines[i]
		if cfg.LMCache != nil {
			k := keys
			if sp.seed != "" {
				k.HashSeed = sp.seed
			}
			if e.hasher, err = lmcache.NewHasher(k); err != nil {
				t.Fatal(err)
			}
			if e.push, err = zctx.NewSocket(zmq.PUSH); err != nil {
				t.Fatal(err)
			}
			e.push.SetLinger(0)
			if err := e.push.Connect("tcp://" + e.host + ":0;" + a.LMCachePullAddr()); err != nil {
				t.Fatal(err)
			}
			url := e.host + ":30081"
			reg, _ := lmcache.Encode(lmcache.RegisterMsg{InstanceID: "vllm-" + e.host, IP: e.host, Port: 30081, DistributedURL: &url})
			if _, err := e.push.SendMessage(reg); err != nil {
				t.Fatal(err)
			}
		}
		if e.pub != nil {
			if err := e.pub.WaitSubscribed(10 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, e := range s.engines {
			if e.push != nil {
				e.push.Close()
			}
		}
		zctx.Term()
	})
	if cfg.LMCache != nil {
		deadline := time.Now().Add(10 * time.Second)
		for len(a.LMCacheIndex.Instances()) < len(specs) { // the registrations travel on their own sockets
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d engines registered", len(a.LMCacheIndex.Instances()), len(specs))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for i, sp := range specs {
		if sp.dead {
			s.engines[i].srv.Close()
		}
	}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var in struct{ Prompt string }
		json.Unmarshal(body, &in)
		d, err := a.Picker.Pick(r.Context(), picker.Request{Path: "/v1/completions", Prompt: in.Prompt})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer d.Booking.Release()
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://"+d.Endpoints[0]+"/v1/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", r.Header.Get("Authorization")) // as Envoy forwards it
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(gw.Close)
	s.gateway = gw.URL
	return s
}

// freePortOn is a port free on the first n IPs of net16.
func freePortOn(t *testing.T, net16 string, n int) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", net16+"1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		free := true
		for i := 2; i <= n; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("%s%d:%d", net16, i, port))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return port
		}
	}
	t.Fatal("no port free on every engine IP")
	return 0
}

// runCheckEnv runs the subcommand against s with the given environment and returns its
// exit code and table.
func runCheckEnv(t *testing.T, s *stack, getenv func(string) string, extra ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	args := append([]string{"-metrics", "http://" + s.picker.MetricsAddr(), "-gateway", s.gateway, "-settle", "1s", "-timeout", "2s"}, extra...)
	code := check(context.Background(), args, getenv, &out, &errOut)
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return code, out.String()
}

// failedRows are the table's FAIL rows as "check target", and its blocked ones.
func failedRows(table string) (failed, blocked []string) {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "FAIL":
			failed = append(failed, line)
		case "blocked":
			blocked = append(blocked, line)
		}
	}
	return failed, blocked
}

// TestCheckLive: the check against a live stack passes when everything is right and, for
// each broken precondition, fails that row alone with its fix.
func TestCheckLive(t *testing.T) {
	ok := engineSpec{}
	for _, tc := range []struct {
		name      string
		source    string
		specs     []engineSpec
		unexposed bool
		fail      string // the one FAIL row's check (and target engine index, or -1)
		target    int
		fix       string // a fragment of the fix printed under it
		key       string // VLLM_API_KEY in the check's environment
	}{
		{name: "a correct LMCache stack passes", source: picker.SourceLMCache, specs: []engineSpec{ok, ok}},
		{name: "a correct vLLM KV events stack passes", source: picker.SourceVLLMEvents, specs: []engineSpec{ok, ok}},
		{name: "a wrong hash seed fails the credit row", source: picker.SourceLMCache, specs: []engineSpec{ok, {seed: "124"}},
			fail: "cache credited (hash seed, chunk size)", target: 1, fix: "--lmcache-hash-seed, now 123"},
		{name: "an unexposed controller port fails its row", source: picker.SourceLMCache, specs: []engineSpec{ok, ok}, unexposed: true,
			fail: "LMCache controller port reachable", target: -1, fix: "expose the controller ports"},
		{name: "a tokenizer that differs fails parity", source: picker.SourceLMCache, specs: []engineSpec{ok, {vocab: 1}},
			fail: "tokenizer parity", target: 1, fix: "--tokenizer PATH"},
		{name: "a silent KV event stream fails the stream row", source: picker.SourceVLLMEvents, specs: []engineSpec{{silent: true}, ok},
			fail: "KV event stream live", target: 0, fix: "--kv-events-config"},
		{name: "engines with --api-key pass with VLLM_API_KEY", source: picker.SourceVLLMEvents, specs: []engineSpec{{apiKey: "k1"}, {apiKey: "k1"}}, key: "k1"},
		{name: "an engine's --api-key without VLLM_API_KEY fails its stream row with the fix", source: picker.SourceVLLMEvents, specs: []engineSpec{ok, {apiKey: "k1"}},
			fail: "KV event stream live", target: 1, fix: "export VLLM_API_KEY"},
		{name: "an engine's --api-key without VLLM_API_KEY fails its LMCache credit row", source: picker.SourceLMCache, specs: []engineSpec{ok, {apiKey: "k1"}},
			fail: "cache credited (hash seed, chunk size)", target: 1, fix: "export VLLM_API_KEY"},
		{name: "a dead engine fails its health", source: picker.SourceLMCache, specs: []engineSpec{ok, {dead: true}},
			fail: "engine healthy", target: 1, fix: "restart it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, tc.source, tc.specs, tc.unexposed)
			code, table := runCheckEnv(t, s, env("LOADAWARE_ADMIN_TOKEN", "tok", "VLLM_API_KEY", tc.key))
			failed, _ := failedRows(table)
			if tc.fail == "" {
				if code != 0 || len(failed) > 0 {
					t.Fatalf("exit %d on a correct stack:\n%s", code, table)
				}
				if !strings.Contains(strings.Join(strings.Fields(table), " "), "pass registry probe through the gateway - 4 requests on") {
					t.Fatalf("the registry probe did not pass:\n%s", table)
				}
				return
			}
			if code != 1 || len(failed) != 1 {
				t.Fatalf("exit %d, failed rows %q; want exit 1 and the %q row alone:\n%s", code, failed, tc.fail, table)
			}
			target := "-"
			if tc.target >= 0 {
				target = s.engines[tc.target].addr()
			}
			if f := strings.Fields(failed[0]); !strings.Contains(failed[0], tc.fail) || !strings.Contains(strings.Join(f, " "), tc.fail+" "+target) {
				t.Fatalf("failed row %q, want %q on %s:\n%s", failed[0], tc.fail, target, table)
			}
			if !strings.Contains(table, tc.fix) {
				t.Fatalf("the fix does not say %q:\n%s", tc.fix, table)
			}
		})
	}
}

func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no metrics URL", nil, "-metrics is required"},
		{"metrics not a URL", []string{"-metrics", "ftp://x"}, "not an http(s) URL"},
		{"one probe request", []string{"-metrics", "p:9090", "-probe-requests", "1"}, "use at least 2"},
		{"stray argument", []string{"-metrics", "p:9090", "x"}, `unexpected argument "x"`},
		{"zero settle", []string{"-metrics", "p:9090", "-settle", "0s"}, "-settle 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := check(context.Background(), tc.args, env(), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.wantErr) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), tc.wantErr)
			}
		})
	}
	for _, metrics := range []string{"picker:9090/", "http://picker:9090", "http://picker:9090/metrics", "picker:9090/metrics/"} {
		o, err := parseCheck([]string{"-metrics", metrics}, env("LOADAWARE_ADMIN_TOKEN", "s"))
		if err != nil || o.metrics != "http://picker:9090" || o.token != "s" {
			t.Fatalf("parseCheck(-metrics %s) = %+v, %v", metrics, o, err)
		}
	}
}

func TestCheckWithoutTokenSaysSo(t *testing.T) {
	s := newStack(t, picker.SourceLMCache, []engineSpec{{}}, false)
	var out, errOut bytes.Buffer
	code := check(context.Background(), []string{"-metrics", "http://" + s.picker.MetricsAddr()}, env(), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "LOADAWARE_ADMIN_TOKEN is not set") || !strings.Contains(out.String(), "401") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr: %s", code, out.String(), errOut.String())
	}
}

// FuzzMetricsFacts: whatever a /metrics answer holds, reading the check's facts from it
// does not crash, and it reports at most one silent-miss IP per series of that gauge.
func FuzzMetricsFacts(f *testing.F) {
	f.Add("loadaware_lmcache_silent_miss{ip=\"10.0.0.1\"} 1\nloadaware_replica_peers 2\n")
	f.Add("# TYPE loadaware_kvevents_endpoint_drops_total counter\nloadaware_kvevents_endpoint_drops_total{reason=\"gap\"} 3\n")
	f.Fuzz(func(t *testing.T, text string) {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			return
		}
		if got, series := len(metricsFacts(fams).SilentMiss), len(fams["loadaware_lmcache_silent_miss"].GetMetric()); got > series {
			t.Fatalf("%d silent-miss IPs from %d series", got, series)
		}
	})
}
