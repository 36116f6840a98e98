package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/internal/zmqtest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/enginemetrics"
	"github.com/loadaware/loadaware-epp/lmcache"
	zmq "github.com/pebbe/zmq4"
)

// fastModel is the calibrated engine model run 20 times faster, so tests take milliseconds.
func fastModel() sim.Config {
	c := sim.DefaultConfig()
	c.Slowdown = 0.05
	c.IngressLatency = time.Millisecond
	return c
}

func startEngine(t *testing.T, cfg EngineConfig) *Engine {
	t.Helper()
	if cfg.IP == "" {
		cfg.IP = "127.0.1.1"
	}
	if cfg.Model == (sim.Config{}) && cfg.From == nil {
		cfg.Model = fastModel()
	}
	e, err := StartEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// events splits a server-sent-events body into its data payloads.
func events(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func ids(n, from int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(from + i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestEngineStreamsAsVLLMDoes(t *testing.T) {
	e := startEngine(t, EngineConfig{})
	base := "http://" + e.Addr()
	tests := []struct {
		name       string
		path, body string
		wantChunks int // token chunks
		wantUsage  bool
		wantPrompt int
	}{
		{"completion with token ids and usage", "/v1/completions", `{"model":"m","prompt":` + ids(300, 1) + `,"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`, 5, true, 300},
		{"completion with text, no usage", "/v1/completions", `{"model":"m","prompt":"hello world","max_tokens":3,"stream":true}`, 3, false, 11},
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`, 4, true, len("user: hi\n")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, base+tc.path, tc.body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			evs := events(t, body)
			if evs[len(evs)-1] != "[DONE]" {
				t.Fatalf("stream does not end with [DONE]: %q", evs)
			}
			chunks, finish := 0, ""
			var got *usage
			for _, ev := range evs[:len(evs)-1] {
				var c struct {
					Object  string `json:"object"`
					Choices []struct {
						Text         string         `json:"text"`
						Delta        map[string]any `json:"delta"`
						FinishReason *string        `json:"finish_reason"`
					} `json:"choices"`
					Usage *usage `json:"usage"`
				}
				if err := json.Unmarshal([]byte(ev), &c); err != nil {
					t.Fatalf("chunk %q: %v", ev, err)
				}
				if c.Usage != nil {
					got = c.Usage
					continue
				}
				chunks++
				if c.Choices[0].FinishReason != nil {
					finish = *c.Choices[0].FinishReason
				}
				if strings.Contains(tc.path, "chat") != (c.Object == "chat.completion.chunk") {
					t.Errorf("object %q on %s", c.Object, tc.path)
				}
			}
			if chunks != tc.wantChunks || finish != "length" {
				t.Errorf("%d token chunks ending with %q, want %d ending with length", chunks, finish, tc.wantChunks)
			}
			if (got != nil) != tc.wantUsage {
				t.Fatalf("usage chunk present %v, want %v", got != nil, tc.wantUsage)
			}
			if got != nil && (got.PromptTokens != tc.wantPrompt || got.CompletionTokens != tc.wantChunks) {
				t.Errorf("usage %+v, want %d prompt and %d completion tokens", *got, tc.wantPrompt, tc.wantChunks)
			}
		})
	}
}

func TestEngineAnswersWithoutStreaming(t *testing.T) {
	e := startEngine(t, EngineConfig{})
	tests := []struct {
		name, path, body, object string
		prompt                   int // prompt tokens without a tokenizer
	}{
		{"completion", "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":2}`, "text_completion", 3},
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, "chat.completion", len("user: hi\n")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, "http://"+e.Addr()+tc.path, tc.body)
			var got struct {
				Object  string `json:"object"`
				Choices []struct {
					Text    string `json:"text"`
					Message *struct {
						Role, Content string
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage usage `json:"usage"`
			}
			if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &got) != nil || len(got.Choices) != 1 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			c, want := got.Choices[0], strings.Repeat(outputText, 2)
			text := c.Text
			if c.Message != nil {
				if c.Message.Role != "assistant" || c.Text != "" {
					t.Errorf("chat message %+v beside text %q: %s", *c.Message, c.Text, body)
				}
				text = c.Message.Content
			}
			if got.Object != tc.object || text != want || (c.Message != nil) != (tc.object == "chat.completion") || c.FinishReason != "length" ||
				got.Usage != (usage{PromptTokens: tc.prompt, CompletionTokens: 2, TotalTokens: tc.prompt + 2}) {
				t.Errorf("answer %s", body)
			}
		})
	}
}

func TestEngineRefusesBadRequests(t *testing.T) {
	e := startEngine(t, EngineConfig{})
	tests := []struct {
		name, body string
		want       int
		wantText   string
	}{
		{"not JSON", `{`, http.StatusBadRequest, "JSON"},
		{"no model", `{"prompt":[1]}`, http.StatusBadRequest, "model"},
		{"max_tokens zero", `{"model":"m","prompt":[1],"max_tokens":0}`, http.StatusBadRequest, "max_tokens 0"},
		{"several prompts", `{"model":"m","prompt":["a","b"]}`, http.StatusBadRequest, "one prompt per request"},
		{"empty prompt", `{"model":"m","prompt":""}`, http.StatusBadRequest, "empty"},
		{"longer than the KV pool", `{"model":"m","prompt":` + ids(100000, 0) + `,"max_tokens":1,"stream":true}`, http.StatusBadRequest, "longer than the KV pool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, "http://"+e.Addr()+"/v1/completions", tc.body)
			var got struct {
				Object, Message string
			}
			_ = json.Unmarshal(body, &got)
			if resp.StatusCode != tc.want || got.Object != "error" || !strings.Contains(got.Message, tc.wantText) {
				t.Errorf("status %d, body %s; want %d with %q", resp.StatusCode, body, tc.want, tc.wantText)
			}
		})
	}
}

func TestEngineTokenizesAndExportsVLLMMetrics(t *testing.T) {
	e := startEngine(t, EngineConfig{})
	base := "http://" + e.Addr()
	tests := []struct {
		name, body string
		want       []uint32
	}{
		{"token ids are the ids", `{"model":"m","prompt":[7,8,9]}`, []uint32{7, 8, 9}},
		{"text without a tokenizer is one id per byte", `{"model":"m","prompt":"ab"}`, []uint32{'a', 'b'}},
		{"chat without a tokenizer", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, []uint32{'u', 's', 'e', 'r', ':', ' ', 'x', '\n'}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, base+"/tokenize", tc.body)
			var got struct {
				Count  int      `json:"count"`
				Tokens []uint32 `json:"tokens"`
			}
			if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &got) != nil {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if diff := cmp.Diff(tc.want, got.Tokens); diff != "" || got.Count != len(tc.want) {
				t.Errorf("tokens (-want +got):\n%s count %d", diff, got.Count)
			}
		})
	}

	// The same 600-token prompt twice: the second finds 592 tokens (37 full blocks, one
	// token always left to compute) in the prefix cache.
	prompt := `{"model":"m","prompt":` + ids(600, 1) + `,"max_tokens":1}`
	for range 2 {
		if resp, body := post(t, base+"/v1/completions", prompt); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	m, err := scrape(context.Background(), http.DefaultClient, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0, "vllm:kv_cache_usage_perc": 0,
		"vllm:prefix_cache_queries_total": 1200, "vllm:prefix_cache_hits_total": 592, "vllm:num_preemptions_total": 0,
		// Two first tokens observed; the CPU tier holds the prompt once (600 tokens of KV).
		"vllm:time_to_first_token_seconds": 2, "vllm:request_prefill_time_seconds": 2,
		"vllm:request_queue_time_seconds": 2, "vllm:e2e_request_latency_seconds": 2,
		"vllm:request_prefill_kv_computed_tokens": 2,
		"vllm:inter_token_latency_seconds":        0, // one output token each: no gap between tokens
		"vllm:cache_config_info":                  1,
		"lmcache:local_cache_usage":               float64(600 * sim.DefaultConfig().KVBytesPerToken()),
	}
	if lora := m["vllm:lora_requests_info"]; lora < 1e9 { // a unix time, as vLLM sets it
		t.Errorf("vllm:lora_requests_info = %v; want the time its adapter lists last changed", lora)
	}
	delete(m, "vllm:lora_requests_info")
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	// A scraper reads the page as a vLLM engine's; the histograms have vLLM's buckets; the
	// info gauges carry their labels.
	page, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(page.Body)
	page.Body.Close()
	c := sim.DefaultConfig()
	r, err := enginemetrics.Parse(text)
	// The prefill counters: two requests, computing 600 tokens and then 1 (592 from the
	// prefix cache, 7 loaded from the CPU tier, one always left to compute).
	if p := r.Prefill; !p.Known || p.Count != 2 || p.Computed != 601 || !(p.Seconds > 0) {
		t.Errorf("prefill counters %+v; want 2 requests, 601 computed tokens, a positive time", p)
	}
	r.Prefill = enginemetrics.PrefillCounters{}
	if err != nil || !cmp.Equal(r, enginemetrics.Reading{LoRAKnown: true, KVPoolTokens: c.Blocks() * c.BlockSize}, cmpopts.EquateEmpty()) {
		t.Errorf("enginemetrics.Parse = %+v, %v; want an idle engine with the simulated pool (%d blocks of %d), read without error", r, err, c.Blocks(), c.BlockSize)
	}
	for _, line := range []string{
		`vllm:time_to_first_token_seconds_bucket{model_name="` + DefaultModelName + `",le="0.001"} 0`,
		`vllm:time_to_first_token_seconds_bucket{model_name="` + DefaultModelName + `",le="2560"} 2`,
		`vllm:time_to_first_token_seconds_bucket{model_name="` + DefaultModelName + `",le="+Inf"} 2`,
		`vllm:e2e_request_latency_seconds_bucket{model_name="` + DefaultModelName + `",le="7680"} 2`,
		`vllm:inter_token_latency_seconds_bucket{model_name="` + DefaultModelName + `",le="80"} 0`,
		fmt.Sprintf(`vllm:cache_config_info{block_size="%d",enable_prefix_caching="True",num_gpu_blocks="%d"} 1`, c.BlockSize, c.Blocks()),
		`vllm:lora_requests_info{max_lora="0",running_lora_adapters="",waiting_lora_adapters=""} `,
	} {
		if !strings.Contains(string(text), line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if r, err := http.Get(base + "/health"); err != nil || r.StatusCode != http.StatusOK {
		t.Errorf("/health: %v %v", r, err)
	}
}

// pull is a test controller: a PULL socket that reports every multipart message with the
// peer address it came from.
type pull struct {
	sock *zmq.Socket
	addr string
}

func newPull(t *testing.T) *pull {
	t.Helper()
	sock, addr := zmqtest.Pull(t)
	return &pull{sock: sock, addr: addr}
}

// recv returns the next multipart message, decoded, and its peer address.
func (p *pull) recv(t *testing.T) ([]lmcache.Message, string) {
	t.Helper()
	frames, md, err := p.sock.RecvMessageBytesWithMetadata(0, "Peer-Address")
	if err != nil {
		t.Fatalf("no LMCache message within %v: %v", zmqtest.RecvTimeout, err)
	}
	var out []lmcache.Message
	for _, f := range frames {
		m, err := lmcache.Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out, md["Peer-Address"]
}

func TestEnginePushesRegistrationThenRealChunkKeysFromItsIP(t *testing.T) {
	p := newPull(t)
	keys := lmcache.KeyConfig{HashSeed: "123"}
	e := startEngine(t, EngineConfig{IP: "127.0.1.2", PullAddr: p.addr, Keys: keys, InstanceID: "vllm-1"})
	msgs, peer := p.recv(t)
	url := "127.0.1.2:30081"
	if diff := cmp.Diff([]lmcache.Message{lmcache.RegisterMsg{InstanceID: "vllm-1", IP: "127.0.1.2", Port: 8001, DistributedURL: &url}}, msgs); diff != "" || peer != "127.0.1.2" {
		t.Fatalf("first message from %s (-want +got):\n%s", peer, diff)
	}

	prompt := make([]uint32, 600)
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	if resp, body := post(t, "http://"+e.Addr()+"/v1/completions", `{"model":"m","prompt":`+ids(600, 1)+`,"max_tokens":1}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	h, err := lmcache.NewHasher(lmcache.KeyConfig{HashSeed: "123", ChunkSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	var want []lmcache.Message
	for _, k := range h.ChunkKeys(prompt) {
		want = append(want, lmcache.KVAdmitMsg{InstanceID: "vllm-1", Key: k, Location: experiment.Location})
	}
	var got []lmcache.Message
	for len(got) < len(want) {
		msgs, _ := p.recv(t)
		got = append(got, msgs...)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("admits (-want +got):\n%s", diff)
	}
	// Every frame arrived, so the socket accepted them all; the counter follows the send.
	deadline := time.Now().Add(10 * time.Second)
	for e.Pushed() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if e.Emitted() != 4 || e.Pushed() != 4 {
		t.Errorf("emitted %d, pushed %d; want 4 and 4 (the registration and 3 admits)", e.Emitted(), e.Pushed())
	}
}

func TestPusherSendsBatchesOfAtMost50InOrder(t *testing.T) {
	p := newPull(t)
	ps, err := startPusher("127.0.0.1", p.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ps.close(); err != nil {
			t.Error(err)
		}
	}()
	// Queue 120 messages at once, as one engine step storing 120 chunks does.
	ps.mu.Lock()
	for i := range 120 {
		frame, err := lmcache.Encode(lmcache.KVAdmitMsg{InstanceID: "x", Key: int64(i), Location: experiment.Location})
		if err != nil {
			t.Fatal(err)
		}
		ps.queue = append(ps.queue, frame)
	}
	ps.mu.Unlock()
	ps.wake <- struct{}{}
	var sizes []int
	next := int64(0)
	for next < 120 {
		msgs, _ := p.recv(t)
		sizes = append(sizes, len(msgs))
		for _, m := range msgs {
			if k := m.(lmcache.KVAdmitMsg).Key; k != next {
				t.Fatalf("key %d arrived where %d was due", k, next)
			}
			next++
		}
	}
	if diff := cmp.Diff([]int{50, 50, 20}, sizes); diff != "" {
		t.Errorf("multipart sizes (-want +got):\n%s", diff)
	}
}

func TestStartEngineNamesWhatIsWrong(t *testing.T) {
	tests := []struct {
		name string
		cfg  EngineConfig
		want string
	}{
		{"no IP", EngineConfig{Model: fastModel()}, "no IP"},
		{"chunk sizes differ", EngineConfig{Model: fastModel(), IP: "127.0.1.1", Keys: lmcache.KeyConfig{HashSeed: "1", ChunkSize: 128}}, "chunk size 128"},
		{"bad model", EngineConfig{Model: sim.Config{ChunkSize: 256}, IP: "127.0.1.1"}, "must be positive"},
		{"not a local address", EngineConfig{Model: fastModel(), IP: "192.0.2.1"}, "listen on 192.0.2.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := StartEngine(tc.cfg)
			if err == nil {
				_ = e.Close()
				t.Fatal("StartEngine succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// BenchmarkEngineCompletion measures one streamed 8-token completion of a 300-token prompt
// (a prefix-cache hit after the first) on the 20-times-faster model: HTTP, the driver and the
// model's steps.
func BenchmarkEngineCompletion(b *testing.B) {
	e, err := StartEngine(EngineConfig{Model: fastModel(), IP: "127.0.1.1"})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	body := `{"model":"m","prompt":` + ids(300, 1) + `,"max_tokens":8,"stream":true}`
	url := "http://" + e.Addr() + "/v1/completions"
	b.ResetTimer()
	for b.Loop() {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
